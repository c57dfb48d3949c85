#!/usr/bin/env bash
# Installs what is missing on a Debian/Ubuntu machine, for one of two purposes:
#
#   scripts/install-deps.sh --demo    # the main job on the built-in `local` machine
#                                     # (scripts/demo.sh): tmux (the sessions' shells), the
#                                     # OpenSSH client (`session attach`, machines added over SSH)
#                                     # and, to build, a C compiler (gcc, libc6-dev)
#   scripts/install-deps.sh --tests   # the whole test bed (scripts/test.sh; the default):
#       the above, plus the OpenSSH server (the tests' real sshd on 127.0.0.1), iproute2 and
#       nftables (fault-injection tests), jq (the examples in docs/cli.md, run as written by a
#       test), GNU time (a test measures peak memory), git (a session cwd that is a repository), zsh and fish (testkit's login-shell
#       test accounts), busybox (its sh is a shell the remote scripts are tested under),
#       the linter for the remote scripts (package shellcheck), nodejs and python3 (the code runtime),
#       and Slurm: slurmctld, slurmd, slurm-client and munge (scripts/slurm-bed.sh, docs/slurm.md)
#
# Says what it installs; safe to run again. Needs root (or sudo) for apt-get.
# RR_INSTALL_DEPS_NO_PIP=1 leaves out the MCP tests' Python SDK (pip), for a Python that does not run them.
set -euo pipefail

case "${1:---tests}" in
  --demo) purpose=demo ;;
  --tests) purpose=tests ;;
  *) echo "usage: scripts/install-deps.sh [--demo|--tests]" >&2; exit 2 ;;
esac

need=()
# the main job: sessions are tmux shells; the OpenSSH client attaches and reaches SSH machines
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
# building the binaries: the linker and the C parts (aws-lc, SQLite) need a C compiler and libc's
# headers, which a fresh Debian with only rustup does not have
command -v cc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)

if [ "$purpose" = tests ]; then
  [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  # nft is in /usr/sbin, which a user's PATH (sudo) does not have on Debian
  command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
  command -v jq >/dev/null 2>&1 || need+=(jq)   # docs/cli.md examples use it
  [ -x /usr/bin/time ] || need+=(time)           # a test measures the CLI's peak memory
  [ -x /usr/bin/zsh ] || need+=(zsh)             # login-shell test account rrtest-zsh
  [ -x /usr/bin/fish ] || need+=(fish)           # login-shell test account rrtest-fish
  command -v git >/dev/null 2>&1 || need+=(git)  # a session cwd that is a git repository
  command -v busybox >/dev/null 2>&1 || need+=(busybox)        # remote scripts under busybox sh
  command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)  # remote scripts are shellchecked
  # code runtime (JavaScript, Python): on the default PATH, which the ssh test account also gets
  [ -x /usr/bin/node ] || [ -x /usr/local/bin/node ] || need+=(nodejs)
  [ -x /usr/bin/python3 ] || [ -x /usr/local/bin/python3 ] || need+=(python3)
  # the Slurm test bed (scripts/slurm-bed.sh, docs/slurm.md): controller, node daemon, clients, munge
  [ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
  [ -x /usr/sbin/slurmd ] || need+=(slurmd)
  command -v salloc >/dev/null 2>&1 && command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
  [ -x /usr/sbin/munged ] || need+=(munge)
fi

# --- The MCP tests (cli/tests/mcp.rs) drive `remote-runner mcp` with the official MCP Python SDK
# (`mcp` 2.x on PyPI, whose snake_case API the client uses; it brings jsonschema). pip runs when this script exits, so after apt-get has
# installed python3 below; a system Python that refuses pip (PEP 668) gets --break-system-packages.
install_mcp_sdk() {
  local rc=$?
  [ "$rc" -eq 0 ] || exit "$rc"
  [ "${purpose:-tests}" = tests ] || return 0   # the test bed only, not the demo's deps
  # RR_INSTALL_DEPS_NO_PIP=1: leave the SDK alone (another Python runs the tests, or no PyPI)
  [ "${RR_INSTALL_DEPS_NO_PIP:-}" != 1 ] || return 0
  python3 -c 'import jsonschema, importlib.metadata as m; assert int(m.version("mcp").split(".")[0]) >= 2' \
    2>/dev/null && return 0
  echo "install-deps: installing the MCP Python SDK (python3 -m pip install 'mcp>=2.3,<3')" >&2
  python3 -m pip install --quiet 'mcp>=2.3,<3' 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages 'mcp>=2.3,<3' \
    || { echo "install-deps: cannot pip install mcp; install python3-pip, then: python3 -m pip install 'mcp>=2.3,<3'" >&2; exit 1; }
}
trap install_mcp_sdk EXIT
# --- end of the MCP block

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps ($purpose): installing ${need[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: need root to install: ${need[*]} (run: apt-get install -y ${need[*]})" >&2
    exit 1
  fi
fi
# Through `env`: sudo resets the environment, and a debconf question asked with the output
# hidden would hang the install.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "${need[@]}" >/dev/null
