#!/usr/bin/env bash
# Installs every Debian package that inferd's build, tests and benchmarks need. Node.js
# and npm (bench/peers.sh runs ONNX Runtime with them) come from Debian only when there is
# no `node` at all: a machine's own Node (NodeSource's 20 here, which bundles npm) stays.
# Idempotent: quiet and quick when everything is already present; runs
# `apt-get update` once, only when something is missing.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang libclang-rt-14-dev
  # engine
  libdnnl-dev libprotobuf-c-dev protobuf-c-compiler libonnx-dev
  # server, handlers, tools
  libh2o-evloop-dev libjansson-dev libjpeg62-turbo-dev libspng-dev libhwloc-dev libxml2-dev
  libzip-dev libcurl4-openssl-dev zlib1g-dev libssl-dev libuv1-dev libyaml-dev
  # tests
  libcmocka-dev python3-torch python3-torchvision python3-onnx python3-numpy
  python3-pil python3-skimage python3-requests curl strace zip haproxy systemd openssl
  # benchmarks
  time bc wrk nginx-light gnuplot-nox
)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
