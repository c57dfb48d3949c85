#!/usr/bin/env bash
# Run the remote-runner benchmarks beside OpenSSH (see docs/benchmarks.md).
#
#   scripts/bench.sh                 full run; rewrites docs/benchmarks.md
#   scripts/bench.sh --quick         short smoke run (< 2 min), writes nothing
#   scripts/bench.sh [--quick] NAME  only some: exec-warm exec-cold-cli mcp-exec-warm turn-latency
#                                    turn-stream file-put-1g file-get-1g tree-10k code-binding seed-loop
#
# Needs: sshd (/usr/sbin/sshd), ssh, scp, sftp, tmux, rsync, python3 with the MCP SDK
# (`pip install 'mcp>=2.3,<3'`, for mcp-exec-warm); root (the bed logs in as a
# dedicated test user it creates). rsync is installed with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in ssh scp sftp tmux rsync; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ -x /usr/sbin/sshd ] || missing+=("sshd")
if [ "${#missing[@]}" -gt 0 ]; then
    echo "bench.sh: missing: ${missing[*]}; installing with apt-get" >&2
    packages=(rsync tmux openssh-client openssh-server)
    if [ "$(id -u)" -eq 0 ]; then
        apt-get install -y "${packages[@]}" || { apt-get update && apt-get install -y "${packages[@]}"; }
    else
        sudo apt-get install -y "${packages[@]}" || { sudo apt-get update && sudo apt-get install -y "${packages[@]}"; }
    fi
fi

# The provider and CLI binaries are driven as separate processes; build them next to the
# benchmark binary (target/release).
cargo build --release -p remote-runner-provider --bin botmux-remote-runner
cargo build --release -p remote-runner-bench --bin remote-runner-bench-cold-exec
cargo build --release -p seed-runner
cargo build --release -p remote-runner --bin remote-runner \
    || echo "bench.sh: the remote-runner CLI did not build; exec-cold-cli uses its engine stand-in" >&2
exec cargo run --release -p remote-runner-bench --bin remote-runner-bench -- "$@"
