#!/bin/bash
# Rebuilds devils_dictionary.txt from Debian's package dict-devil (1.0-13.1): the text of
# /usr/share/dictd/devil.dict.dz (a dictzip file, which gzip reads), unchanged. Needs apt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
apt-get download dict-devil >/dev/null 2>&1 || { apt-get update -qq && apt-get download dict-devil; }
dpkg-deb -x dict-devil_*.deb x
gzip -dc x/usr/share/dictd/devil.dict.dz > "$here/devils_dictionary.txt"
sha256sum "$here/devils_dictionary.txt"
