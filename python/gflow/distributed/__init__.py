"""Multi-process jobs: ``python -m gflow.distributed.launch --nproc_per_node N script.py``."""
