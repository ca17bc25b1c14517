#!/usr/bin/env bash
# Build pbd's container image (deploy/Containerfile) with podman, as root, from what Debian's
# and PyPI's package registries serve: no image registry is used.
#   scripts/build-image.sh [TAG]        (default localhost/pbd-tritonserver:latest)
# 1. podman, runc and mmdebstrap are installed with apt-get when missing.
# 2. A minimal Debian bookworm root filesystem (python3, python3-venv, ca-certificates) is made
#    with mmdebstrap and imported as localhost/pbd-debian-base:bookworm (once; it is reused).
# 3. A wheel of this checkout is built, and the Containerfile installs it with pip.
# Build files stay in .image-build/ (ignored): the wheel, the base's tarball, podman's
# containers.conf and temporary files. Other podman commands on this machine need the same
# CONTAINERS_CONF (crun and systemd cgroups do not work here, see deploy/kserve/README.md):
#   export CONTAINERS_CONF="$PWD/.image-build/containers.conf"
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tag="${1:-localhost/pbd-tritonserver:latest}"
base=localhost/pbd-debian-base:bookworm
work="$root/.image-build"

[ "$(id -u)" = 0 ] || { echo "build-image: run as root (podman builds into root's storage)" >&2; exit 1; }
missing=()
for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    { echo "build-image: ${missing[*]} missing and no apt-get to install them" >&2; exit 1; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap >/dev/null
fi

mkdir -p "$work/tmp"
export TMPDIR="$work/tmp"  # podman's and mmdebstrap's scratch space, not the machine's /tmp
# runc with cgroupfs works where crun or systemd's cgroup manager do not (hybrid cgroups, no
# systemd bus); the default ulimits ask for more than some machines allow.
cat > "$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$work/containers.conf"

if ! podman image exists "$base"; then
  rm -f "$work/base.tar"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$work/base.tar"
  podman import --quiet "$work/base.tar" "$base" >/dev/null
  rm -f "$work/base.tar"
fi

python=.venv/bin/python
if [ ! -x "$python" ]; then
  python3 -m venv "$work/venv"
  python="$work/venv/bin/python"
fi
rm -rf "$work/context"
mkdir -p "$work/context"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/context" "$root"
cp deploy/Containerfile "$work/context/Containerfile"
# pip in the RUN step reaches PyPI as the host's pip does: the host's network, and the host's
# CA bundle (PIP_CERT, or Debian's) mounted for the build only.
trust=()
ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
if [ -f "$ca" ]; then
  trust=(--volume "$ca:/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt)
fi
previous="$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
podman build --quiet --network host "${trust[@]}" --build-arg "BASE=$base" -t "$tag" \
  "$work/context" >/dev/null
# The image the tag named before is left untagged: remove it (unless a container uses it).
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
echo "$tag $(podman image inspect --format '{{.Size}}' "$tag") bytes"
