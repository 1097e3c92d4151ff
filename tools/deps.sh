#!/bin/sh
# Installs the given Debian packages when missing: with apt-get as root,
# otherwise prints the exact command to run.
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "installing:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "missing Debian packages; run:"
  echo "  sudo apt-get update && sudo apt-get install -y$missing"
  exit 1
fi
