#!/bin/sh
# bench/peers/setup.sh: prepares the peer side of `make bench-peers`
# (bench/peers/run.sh): Debian's Python stack, a linear_operator source tree
# and a GPyTorch source tree, both kept OUT of git. Safe to run again; it
# says what is missing.
#
# 1. Debian packages (installed when run as root, else the command to run):
#      python3-torch python3-numpy python3-scipy python3-sklearn
#    Python runs as /usr/bin/python3; PyPI is not used.
# 2. linear_operator 0.5.3 (the newest release that runs on Debian's torch
#    1.13), commit eec70f9e1cd9106c32b05a3e774ea29d00d71cea of
#    github.com/cornellius-gp/linear_operator. In a session with the search
#    tools, bring the repository with the `fetch` tool
#    (source github:cornellius-gp/linear_operator); it answers with a git
#    directory, /work/.mirror/cornellius-gp+linear_operator/repo. Then run
#      LO_GIT_DIR=<that git directory> sh bench/peers/setup.sh
#    which extracts the commit into $LO_SRC (default ../linear_operator_src
#    beside the repository: outside git) and adds
#    linear_operator/version.py (version = "0.5.3"), which the release
#    tarball has and the repository does not. Any other way to a copy of
#    that commit works: point LO_SRC at it.
# 3. GPyTorch v1.12 (the newest release that runs on torch 1.13 with
#    linear_operator 0.5.3; workload GPY of run.sh): `fetch`
#    github:cornellius-gp/gpytorch (git directory
#    /work/.mirror/cornellius-gp+gpytorch/repo), then
#      GPYT_GIT_DIR=<that git directory> sh bench/peers/setup.sh
#    which extracts tag v1.12 into $GPYT_SRC (default ../gpytorch_src beside
#    the repository) and adds gpytorch/version.py (version = "1.12"). It
#    imports with PYTHONPATH=$GPYT_SRC:$LO_SRC:bench/peers/shims and nothing
#    more (gpy_peer.py sets that path itself).
# 4. `make bench-peers` (or sh bench/peers/run.sh W5 W8 GPY). linear_operator
#    and GPyTorch import jaxtyping for annotations only; bench/peers/shims
#    stands in.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
COMMIT=eec70f9e1cd9106c32b05a3e774ea29d00d71cea
LO_SRC=${LO_SRC:-$ROOT/../linear_operator_src}
GPYT_TAG=v1.12
GPYT_SRC=${GPYT_SRC:-$ROOT/../gpytorch_src}
status=0

sh "$ROOT/tools/deps.sh" python3-torch python3-numpy python3-scipy python3-sklearn || status=1

if [ -f "$LO_SRC/linear_operator/__init__.py" ]; then
  echo "linear_operator tree: $LO_SRC"
elif [ -n "${LO_GIT_DIR:-}" ]; then
  mkdir -p "$LO_SRC" &&
    git --git-dir="$LO_GIT_DIR" archive "$COMMIT" | tar -x -C "$LO_SRC" &&
    echo "linear_operator $COMMIT extracted into $LO_SRC" || status=1
else
  echo "no linear_operator tree at $LO_SRC: fetch github:cornellius-gp/linear_operator"
  echo "(the search tools' fetch), then LO_GIT_DIR=<its git dir> sh bench/peers/setup.sh"
  status=1
fi
if [ -d "$LO_SRC/linear_operator" ] && [ ! -f "$LO_SRC/linear_operator/version.py" ]; then
  echo 'version = "0.5.3"' > "$LO_SRC/linear_operator/version.py" && echo "wrote version.py"
fi

if [ -f "$GPYT_SRC/gpytorch/__init__.py" ]; then
  echo "GPyTorch tree: $GPYT_SRC"
elif [ -n "${GPYT_GIT_DIR:-}" ]; then
  mkdir -p "$GPYT_SRC" &&
    git --git-dir="$GPYT_GIT_DIR" archive "$GPYT_TAG" | tar -x -C "$GPYT_SRC" &&
    echo "GPyTorch $GPYT_TAG extracted into $GPYT_SRC" || status=1
else
  echo "no GPyTorch tree at $GPYT_SRC: fetch github:cornellius-gp/gpytorch"
  echo "(the search tools' fetch), then GPYT_GIT_DIR=<its git dir> sh bench/peers/setup.sh"
  status=1
fi
if [ -d "$GPYT_SRC/gpytorch" ] && [ ! -f "$GPYT_SRC/gpytorch/version.py" ]; then
  echo 'version = "1.12"' > "$GPYT_SRC/gpytorch/version.py" && echo "wrote gpytorch/version.py"
fi

if [ "$status" = 0 ]; then
  PYTHONPATH="$ROOT/bench/peers/shims:$LO_SRC" /usr/bin/python3 -c \
    "import torch, linear_operator; print('peer ready: torch', torch.__version__, '+ linear_operator', linear_operator.__version__)" ||
    status=1
  PYTHONPATH="$GPYT_SRC:$LO_SRC:$ROOT/bench/peers/shims" /usr/bin/python3 -c \
    "import gpytorch; print('peer ready: gpytorch', gpytorch.__version__)" ||
    status=1
fi
exit $status
