#!/usr/bin/env bash
# Prints the Debian packages that provide the shared libraries the given ELF
# files link directly (their DT_NEEDED entries), one per line, sorted.
# The image build runs it in the build stage on encoderd and
# libencoderd_sentencepiece.so; the runtime stage installs exactly this list
# (apt adds the transitive dependencies), so the runtime image follows the
# binary's real link line instead of a hand-kept list.
# Driver libraries (libcuda, libnvidia-*) are skipped: the NVIDIA container
# runtime mounts the host driver's copies into the container at run time.
# Usage: deploy/scripts/runtime_packages.sh ELF...
set -euo pipefail
(($#)) || { echo "usage: $0 ELF..." >&2; exit 2; }

for elf in "$@"; do
  [ -f "$elf" ] || { echo "runtime_packages: no such file: $elf" >&2; exit 1; }
  # ldd resolves each NEEDED name to the path the loader would use.
  needed=$(objdump -p "$elf" | awk '/^ *NEEDED/{print $2}')
  for name in $needed; do
    case "$name" in
      libcuda.so* | libnvidia-*) echo "runtime_packages: $name: from the host driver" >&2; continue ;;
    esac
    # "name => path (address)", or for the dynamic loader (NEEDED by
    # binaries that reference __tls_get_addr, as CUDA's static cudart does)
    # "/lib64/name (address)".
    path=$(ldd "$elf" | awk -v n="$name" '
      $1 == n && $2 == "=>" {print $3; exit}
      {base = $1; sub(/.*\//, "", base)}
      base == n && $2 ~ /^\(/ {print $1; exit}')
    if [ -z "$path" ] || [ "$path" = "not" ]; then
      echo "runtime_packages: $elf: $name is not resolvable" >&2
      exit 1
    fi
    # Files reached through an alternatives or /lib -> /usr/lib symlink are
    # owned under their resolved name.
    owner=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(readlink -f "$path")" 2>/dev/null ||
      dpkg -S "/usr$path" 2>/dev/null || true)
    if [ -z "$owner" ]; then
      echo "runtime_packages: $elf: no package owns $path ($name)" >&2
      exit 1
    fi
    echo "${owner%%:*}"
  done
done | sort -u
