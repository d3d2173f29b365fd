#!/usr/bin/env bash
# The system packages the suite needs, installed where this machine allows: Debian's
# chromium (headless renders of the HTML reports) and slurm-wlm + munge (a real
# single-node SLURM cluster, tests/slurm_cluster.py). `make test` and .ci/run both call
# this; with everything present it installs nothing and prints nothing.
#
# Installing needs apt-get and root (or sudo without a password). Where neither is
# available it says once what is missing and exits 0: the tests that need a missing
# package then skip with one summary line (tests/system_packages.py), except under
# CI=true, where they fail.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || missing+=(chromium)
for tool in slurmctld slurmd sbatch squeue; do
    if ! command -v "$tool" >/dev/null 2>&1; then missing+=(slurm-wlm); break; fi
done
command -v munged >/dev/null 2>&1 || missing+=(munge)
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$sudo" = "none" ]; then
    why="no apt-get here"
    command -v apt-get >/dev/null 2>&1 && why="not root, and sudo asks for a password"
    echo "system packages not installed (${why}): ${missing[*]}. The tests that need them" \
        "will skip; install them with: sudo apt-get install ${missing[*]}" >&2
    exit 0
fi
echo "installing system packages for the suite: ${missing[*]}" >&2
# Their postinst scripts cannot start daemons without an init system; that is fine, the
# SLURM fixture starts its own with every file in a temporary directory.
$sudo apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
