"""The verify-time `apt-get` / `apt` wrapper: answers what a Terminal-Bench test.sh asks Debian for offline.

TB 2.x verifiers start with `apt-get update; apt-get install -y curl` (curl to fetch uv's installer, which
rsi's curl wrapper answers). Offline the real apt-get fails, so the wrapper, first on `PATH` in the
verifier, answers:

- `update`: not fetched (nothing may be installed from it offline); a marker notes it was skipped;
- `install P...` where every package is one rsi provides (`provided`: curl / wget when the script uses
  them only for uv's installer), is installed in the image (dpkg says so), or names a command that
  already exists in the image: nothing to do;

each time saying what it did on stderr. Any other call, and an install of something none of those covers,
goes to the real tool (after the real `update` it skipped, so that with a network it works as before;
offline it fails as it would have, and the trial says the verifier could not set itself up).
"""

from __future__ import annotations

from collections.abc import Iterable

NAMES = ("apt-get", "apt")

WRAPPER = r"""#!/bin/sh
# rsi verify-time shim for {name}: answers update, and installs of what rsi or the image already provides,
# offline; everything else goes to the real {name}.
real=""
oldifs=$IFS; IFS=:
for d in $PATH; do
  [ "$d" = "{bin}" ] && continue
  if [ -x "$d/{name}" ]; then real="$d/{name}"; break; fi
done
IFS=$oldifs
sub=""; pkgs=""; skip=""
for a in "$@"; do
  if [ -n "$skip" ]; then skip=""; continue; fi
  case "$a" in
    -o|-c|-t|--option|--config-file|--target-release|--default-release) skip=1 ;;
    -*) ;;
    *) if [ -z "$sub" ]; then sub="$a"; else pkgs="$pkgs $a"; fi ;;
  esac
done
why() {{
  case " {provided} " in
    *" $1 "*) echo "provided by rsi's shim (it answers fetches of uv's installer)"; return 0 ;;
  esac
  if dpkg-query -W -f='${{Status}}' "$1" 2>/dev/null | grep -q "ok installed"; then
    echo "installed in the image"; return 0
  fi
  oldifs=$IFS; IFS=:
  for d in $PATH; do
    [ "$d" = "{bin}" ] && continue
    if [ -x "$d/$1" ]; then IFS=$oldifs; echo "its command is in the image ($d/$1)"; return 0; fi
  done
  IFS=$oldifs
  return 1
}}
case "$sub" in
  update)
    echo "rsi shim: {name} update answered offline: package lists not fetched (rsi provides the verifier's tools)" >&2
    : > {dir}/apt-update-skipped 2>/dev/null
    exit 0 ;;
  install)
    missing=""; said=""
    for p in $pkgs; do
      n=${{p%%=*}}; n=${{n%%/*}}; n=${{n%%:*}}
      if w=$(why "$n"); then said="$said; $n: $w"; else missing="$missing $n"; fi
    done
    if [ -z "$missing" ]; then
      echo "rsi shim: {name} install$pkgs answered offline, nothing installed${{said:+ (${{said#; }})}}" >&2
      exit 0
    fi
    echo "rsi shim: {name} install: rsi cannot provide$missing offline; running the real {name}" >&2
    if [ -f {dir}/apt-update-skipped ] && [ -n "$real" ]; then
      rm -f {dir}/apt-update-skipped
      "$real" update >&2 || true
    fi ;;
esac
if [ -z "$real" ]; then echo "{name}: command not found" >&2; exit 127; fi
exec "$real" "$@"
"""


def wrapper(name: str, *, shim_dir: str, shim_bin: str, provided: Iterable[str]) -> str:
    """The wrapper for `name` (apt-get or apt); `provided` are the packages rsi's shim stands in for."""
    return WRAPPER.format(name=name, dir=shim_dir, bin=shim_bin, provided=" ".join(sorted(set(provided))))
