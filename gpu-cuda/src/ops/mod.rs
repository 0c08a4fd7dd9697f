//! The kernels, one file per operator family.

pub(crate) mod copy;
pub(crate) mod elementwise;
pub(crate) mod matmul;
pub(crate) mod reduce;
pub(crate) mod rows;
pub(crate) mod softmax;
