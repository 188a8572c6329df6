#!/usr/bin/env bash
# Builds a base guest image for drover's qemu executor (see docs/vm.md):
# builds drover from this checkout, then runs `drover vm image build` with
# the arguments given, which prints the image's files, how to boot it by
# hand and a config.toml runner.
#
#   scripts/vm-image.sh                  # the busybox image
#   scripts/vm-image.sh --kind debian    # the Debian one (root, minutes)
#   scripts/vm-image.sh -q               # print only the image's directory
#
# Needs apt-get (the kernel comes from Debian's mirror), dpkg-deb,
# mkfs.ext4, qemu-img, busybox-static and, for busybox, dropbear-bin;
# debian needs debootstrap. Images are cached in
# ${DROVER_CACHE_DIR:-$HOME/.cache/drover}/vm; the binary is left in
# ${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin/drover-vm.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${DROVER_CACHE_DIR:-$HOME/.cache/drover}/bin"
mkdir -p "$bin"
go build -o "$bin/drover-vm" ./cmd/drover
exec "$bin/drover-vm" vm image build "$@"
