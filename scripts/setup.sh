#!/usr/bin/env bash
# Installs every build, test and reference dependency of encoderd from Debian
# packages. Idempotent: packages already present are skipped by apt.
# Usage: sudo scripts/setup.sh   (root is required for apt-get)
set -euo pipefail

# The CPU kernels are x86-64 code (AVX2/AVX-512 with runtime checks, and a
# generic path for x86-64 without them): say so rather than fail halfway.
if [ "$(uname -m)" != x86_64 ]; then
  echo "setup.sh: encoderd builds for x86-64 (amd64) only; this machine is $(uname -m)" >&2
  exit 1
fi

PACKAGES=(
  # toolchain and build
  build-essential cmake ninja-build ccache pkg-config git clang-format
  # server stack
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # TLS terminated by the connection guard (server/net/tls_terminator.cc)
  libssl-dev
  libspdlog-dev libfmt-dev libyaml-cpp-dev prometheus-cpp-dev
  # metrics end-to-end test: a real Prometheus server and promtool
  prometheus
  # engine
  libtorch-dev libdnnl-dev libopenblas-dev libopenblas0-pthread
  libsentencepiece-dev sentencepiece nlohmann-json3-dev libicu-dev zlib1g-dev
  # tests and reference implementation
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-torchtext python3-sentencepiece python3-numpy
  python3-grpcio python3-protobuf
  # GPT-2's pre-tokenizing pattern (\p{L}), for the byte-level BPE reference
  python3-regex
  # HTTP/2 frame by frame, for calls gRPC libraries will not make (e2e tests)
  python3-h2
  # bundled langid model (training/langid): msgunfmt, the gettext catalogs it
  # learns from (langid_data.CATALOGS), python3-yaml for evaluate.py
  gettext python3-yaml gettext-base gnupg-l10n libc-l10n libdpkg-perl libexif12
  libglib2.0-data libgtk2.0-common libgdk-pixbuf2.0-common libgnutls30
  libgstreamer1.0-0 libpam-runtime libapt-pkg6.0 libavahi-common-data
  at-spi2-common appstream binutils-common gsettings-desktop-schemas
  shared-mime-info man-db psmisc procps login wget xz-utils make
  # ... and the translated man pages it learns prose from (langid_prose.MAN_PACKAGES)
  manpages manpages-dev manpages-de manpages-fr manpages-es manpages-it
  manpages-pl manpages-ru manpages-uk manpages-cs manpages-nl manpages-pt
  manpages-pt-br manpages-sv manpages-ja manpages-zh manpages-tr
  # fuzzing and the sanitizer builds
  clang libclang-rt-14-dev
  # loadtest sweep plots (loadtest/scripts)
  gnuplot-nox
  # deployment manifest checks (tests/deploy); curl runs the model-fetch
  # init script on a file:// archive
  yamllint curl
  # access end-to-end test: certificates made with the openssl CLI
  openssl
  # the image test (deploy/scripts/test_image.sh, manual): podman builds the
  # image, debootstrap makes its Debian base without a registry
  podman debootstrap
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # --no-install-recommends: python3-torch would otherwise pull a desktop stack.
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# PyTorch and LibTorch use whatever libblas.so.3 the alternatives system
# selects; make sure it is OpenBLAS, not the slow reference BLAS, so that
# baselines are fair.
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/{print $2}' || true)
case "$blas" in
  *openblas*) ;;
  *)
    alt=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas-pthread | head -n1 || true)
    if [ -n "$alt" ]; then
      SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$alt"
      lapack=$(update-alternatives --list liblapack.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas-pthread | head -n1 || true)
      [ -z "$lapack" ] || $SUDO update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$lapack"
    fi
    ;;
esac
echo "setup: all dependencies present"
