# remote-runner control script (POSIX sh). Installed once per machine as
#   ${XDG_STATE_HOME:-$HOME/.local/state}/remote-runner/lib/ctl-<content hash>.sh
# and run by the one line every login shell parses (see engine/src/remote/mod.rs):
#   exec /bin/sh -c '<find this file, check its owner and mode and those above it>' rr VERB NONCE
# Parameters arrive on stdin as shell assignments, one or more lines, ended by the line
# "@rr:NONCE:end"; whatever follows on stdin is the verb's data. Replies start after the line
# "@rr:NONCE:begin" on stdout and on stderr, so nothing a startup file printed before can be
# taken for a reply, and nothing it prints can forge one (it cannot know the nonce).
# shellcheck disable=SC2034 # parameters are set by eval
# shellcheck disable=SC2154 # ... and read here

rr_verb=${1-}
rr_nonce=${2-}
# This file is <root>/lib/ctl-HASH.sh.
RR_ROOT=${0%/lib/*}
RR_CTL=${0##*/}
unset TMUX TMUX_PANE
umask 077


# rr_read_params NONCE: the assignment lines up to "@rr:NONCE:end" into rr_params; false when
# stdin ended first.
rr_read_params() {
  rr_params=
  while IFS= read -r rr_line; do
    if [ "$rr_line" = "@rr:$1:end" ]; then return 0; fi
    rr_params="$rr_params$rr_line
"
  done
  return 1
}

# ---------------------------------------------------------------- ownership (StrictModes-like)

# rr_secure PATH: PATH is ours (or root's) and no one else can write to it, unless it is a
# root-owned sticky directory such as /tmp. Otherwise sets rr_why to the reason and returns 1.
# Sets rr_owner to PATH's owner uid. One `ls` process; the account's uid is looked up once.
rr_secure() {
  rr_ls=$(LC_ALL=C ls -ldn -- "$1" 2>/dev/null) || { rr_why="$1 does not exist"; return 1; }
  # shellcheck disable=SC2086 # split the ls line into fields
  set -- "$1" $rr_ls
  rr_owner=$4
  [ -n "${rr_uid-}" ] || rr_uid=$(id -u)
  if [ "$4" != "$rr_uid" ] && [ "$4" != 0 ]; then
    rr_why="$1 is owned by uid $4, not by you (uid $rr_uid)"
    return 1
  fi
  case $2 in
  ?????w???t* | ?????????t*) [ "$4" = 0 ] && return 0 ;;
  esac
  case $2 in
  ?????w* | ????????w*)
    rr_why="$1 is writable by other users (mode $2)"
    return 1
    ;;
  esac
  return 0
}

# rr_secure_chain PATH: PATH and every directory above it pass rr_secure; PATH must be ours.
# Otherwise sets rr_why and returns 1. A directory already found secure by this process is not
# looked at again (rr_checked): preparing a machine checks four paths with one chain above them.
rr_secure_chain() {
  rr_p=$1
  rr_secure "$rr_p" || return 1
  if [ "$rr_owner" != "$rr_uid" ]; then rr_why="$rr_p is not owned by you"; return 1; fi
  rr_checked="${rr_checked:-
}$rr_p
"
  while [ "$rr_p" != / ] && [ -n "$rr_p" ]; do
    rr_p=${rr_p%/*}
    [ -n "$rr_p" ] || rr_p=/
    case $rr_checked in
    *"
$rr_p
"*) return 0 ;;
    esac
    rr_secure "$rr_p" || return 1
    rr_checked="${rr_checked:-
}$rr_p
"
  done
  return 0
}

# ---------------------------------------------------------------- machine

# The account's login shell: $SHELL (sshd and login set it), else the passwd entry (a process
# started without one, by cron or a CI runner), else /bin/sh.
rr_user_shell() {
  if [ -n "${SHELL-}" ]; then
    printf '%s\n' "$SHELL"
    return
  fi
  rr_pw=$(getent passwd "$(id -u)" 2>/dev/null || grep "^$(id -un 2>/dev/null):" /etc/passwd 2>/dev/null)
  rr_pw=${rr_pw##*:}
  printf '%s\n' "${rr_pw:-/bin/sh}"
}

# prepare: create the state root, check its ownership, report the tools.
rr_prepare() {
  mkdir -p -- "$RR_ROOT/sessions" "$RR_ROOT/lib" 2>/dev/null
  for rr_d in "$RR_ROOT" "$RR_ROOT/sessions" "$RR_ROOT/lib" "$RR_ROOT/lib/$RR_CTL"; do
    if ! rr_secure_chain "$rr_d"; then
      echo "@insecure $rr_why"
      exit 0
    fi
  done
  echo "@prepared"
  printf 'root=%s\n' "$RR_ROOT"
  printf 'shell=%s\n' "$(rr_user_shell)"
  rr_t=$(command -v tmux 2>/dev/null) || rr_t=
  printf 'tmux=%s\n' "$rr_t"
  if [ -n "$rr_t" ]; then printf 'tmux_version=%s\n' "$("$rr_t" -V 2>&1 | head -n 1)"; fi
  rr_b=$(command -v bash 2>/dev/null) || rr_b=
  printf 'bash=%s\n' "$rr_b"
  # shellcheck disable=SC2016 # expanded by that bash
  if [ -n "$rr_b" ]; then printf 'bash_version=%s\n' "$("$rr_b" --norc --noprofile -c 'echo "$BASH_VERSION"' 2>/dev/null)"; fi
  exit 0
}

# sh: run the POSIX script in RR_SCRIPT with the rest of stdin.
rr_sh() {
  eval "$RR_SCRIPT"
}

# ---------------------------------------------------------------- sessions

# rr_ended DIR: the command in DIR has ended: its exit file holds the line the session shell
# (or a stop) writes. A command can write anything into its own exit file; anything else is not
# an end, and never a sign that the session is gone (tmux says that).
rr_ended() {
  rr_e=
  [ -s "$1/exit" ] || return 1
  IFS= read -r rr_e <"$1/exit" || :
  case $rr_e in
  "code="*" how="*" state="*) ;;
  *) return 1 ;;
  esac
  # The code a number, how and state words (what the engine parses): `code=x how= state=`
  # written by a command is garbage, not an end.
  rr_ec=${rr_e#code=}
  rr_eh=${rr_ec#* how=}
  rr_es=${rr_eh#* state=}
  rr_ec=${rr_ec%% *}
  rr_eh=${rr_eh%% *}
  rr_es=${rr_es%% *}
  case $rr_ec in '' | *[!0-9]*) return 1 ;; esac
  case $rr_eh in '' | *[!a-z_]*) return 1 ;; esac
  case $rr_es in '' | *[!a-z_]*) return 1 ;; esac
  return 0
}

# A session whose pane process holds the secrets (rr.sh, `pane`): started by this version.
rr_keyed() {
  [ -s "$SD/pane.pid" ]
}

# The channel a foreground command's end signals: CH (`rr-ID-kKEY`, the engine's) in a keyed
# session; a session started by an older version, or a start whose key could not be given
# (rr_plain), signals plain `rr-ID`.
rr_channel() {
  case ${CH-} in
  rr-*-k*) if [ "${rr_plain-}" = 1 ] || ! rr_keyed; then CH=${CH%-k*}; fi ;;
  esac
}

# rr_give_key: this command's notice secret (NKEY, from the engine) to the session shell:
# written into the file the pane process holds open under no name (/proc/PANE/fd/4), once the
# pane process is known to be the session shell's parent (rr_terminal_group: rr_pp). Nothing
# is written anywhere else.
# Where it cannot be (no /proc access, say), the command ends on its plain channel (rr_plain),
# as in a session of an older version.
rr_give_key() {
  [ -n "${NKEY-}" ] && [ "$MODE" != bg ] || return 0
  rr_plain=1
  rr_pane=
  [ -n "${rr_pp-}" ] && read -r rr_pane 2>/dev/null <"$SD/pane.pid" && [ "$rr_pane" = "$rr_pp" ] \
    && { printf '%s\n' "$NKEY" >"/proc/$rr_pp/fd/4"; } 2>/dev/null && rr_plain=0
}

# tmux expands formats (#{...}, #(...)) in some arguments: a literal '#' is written '##'.
rr_tmux_literal() {
  case $1 in
  *'#'*) printf '%s' "$1" | sed 's/#/##/g' ;;
  *) printf '%s' "$1" ;;
  esac
}

rr_tmux() {
  "$T" -L "$S" "$@"
}

# Resolve the environment a login shell of the user's own shell would have, bounded; what its
# startup files print goes to $SD/startup.out (shown in the terminal, never in command output).
rr_login_env() {
  rr_shell=$(rr_user_shell)
  rr_name=${rr_shell##*/}
  case $rr_name in
  bash | zsh | ksh | mksh) set -- -l -i -c ;;
  fish | dash | sh | ash) set -- -l -c ;;
  tcsh | csh) set -- -c ;;
  *) set -- -l -c ;;
  esac
  if command -v timeout >/dev/null 2>&1; then
    rr_bound="timeout -k 2 $ENVBOUND"
  else
    rr_bound=
  fi
  # shellcheck disable=SC2016 # expanded by the login shell
  RR_ENV_OUT=$SD/login.env $rr_bound "$rr_shell" "$@" 'cat /proc/self/environ > "$RR_ENV_OUT"' \
    </dev/null >"$SD/startup.raw" 2>&1
  rr_s=$?
  # What an interactive shell without a terminal says about itself is ours, not the user's.
  grep -v -e 'cannot set terminal process group' -e 'no job control in this shell' \
    "$SD/startup.raw" >"$SD/startup.out"
  rm -f -- "$SD/startup.raw"
  if [ "$rr_s" = 124 ] || [ "$rr_s" = 137 ]; then
    rm -f -- "$SD/login.env"
    echo "env=timeout"
  elif [ -s "$SD/login.env" ]; then
    echo "env=ok"
  else
    echo "env=failed $rr_s"
  fi
  printf '%s\n' "$rr_name" >"$SD/login.shell"
}

# One word for a tmux configuration file: single-quoted, a quote as '\''.
rr_conf_word() {
  printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

# A session on a compute node (Slurm, docs/slurm.md): the tmux server runs there in the
# foreground as a job step of its own (`NODE_STEP`: srun's words, one a line), started from this
# (login) node and detached from this call, so the session outlives it; its configuration file
# creates the session. Its socket is in the node's /tmp; every later call for the session runs
# on the node too. Then wait (bounded) for the shell's ready, retrying while the server starts.
rr_start_on_node() {
  # NODE_STEP's words as arguments (split on newlines only, no globbing), as slurm.sh does.
  rr_ifs=$IFS IFS='
'
  set -f
  # shellcheck disable=SC2086 # split into words on purpose
  set -- $NODE_STEP
  set +f
  IFS=$rr_ifs
  {
    printf 'new-session -d -s %s -x %s -y %s -c %s --' "$(rr_conf_word "$SID")" "$COLS" "$ROWS" \
      "$(rr_conf_word "$rr_sd")"
    for rr_w in "$BASH" --noprofile --norc "$SD/rr.sh" pane; do printf ' %s' "$(rr_conf_word "$rr_w")"; done
    printf '\npipe-pane -o -t %s %s\n' "$(rr_conf_word "=$SID:")" \
      "$(rr_conf_word "exec cat >> '$(rr_tmux_literal "$SD")/transcript.raw'")"
  } >"$SD/tmux.conf" || exit 3
  # Slurm ends a step by signalling its task, not every process under it: the task is a small
  # sh that hands the signal on to the server.
  # shellcheck disable=SC2016 # expanded by that sh
  SHELL=/bin/sh setsid "$@" /bin/sh -c '"$1" -D -L "$2" -f "$3" & p=$!
    trap "kill -TERM $p" HUP INT TERM
    wait $p; wait $p' rr-node-tmux "$T" "$S" "$SD/tmux.conf" </dev/null >"$SD/server.log" 2>&1 &
  rr_server=$!
  rr_end=$(($(date +%s) + rr_limit))
  until "$@" timeout "$rr_limit" "$T" -L "$S" wait-for "rr-$SID-ready" 2>/dev/null; do
    if ! kill -0 "$rr_server" 2>/dev/null || [ "$(date +%s)" -ge "$rr_end" ]; then
      cat "$SD/server.log" >&2
      exit 4
    fi
    sleep 0.1
  done
}

# The session shell ends a caller's wait for a command by naming its window "rr-<id>" with an
# escape sequence (printed by a builtin: no process), and this hook, run inside the tmux server,
# signals the channel of that name. Only a name of exactly that shape is used: a window name is
# text any program in the pane can set, and here it becomes a command. Needs tmux 3.2
# (run-shell -C); where setting it fails, $SD/wake.esc is not made and the shell runs a tmux
# client to wake the caller, as it does when other waiters are registered.
rr_fast_wake() {
  # shellcheck disable=SC2016 # tmux formats, not shell expansions
  rr_tmux set-option -w -t "=$SID:" allow-rename on \; set-hook -t "=$SID:" window-renamed \
    'run-shell -C "#{?#{m/r:^rr-[A-Za-z0-9_-]+$,#{window_name}},wait-for -S #{window_name},}"' \
    >/dev/null 2>&1 && : >"$SD/wake.esc"
}

# start_session: directories, session script (stdin), login environment, tmux session, ready.
rr_start_session() {
  if [ ! -d "$CWD" ]; then echo @nocwd; exit 0; fi
  mkdir -p -- "$CD" || exit 3
  if ! rr_secure_chain "$SD"; then echo "@insecure $rr_why"; exit 0; fi
  cat >"$SD/rr.sh" || exit 3
  # This session's shell ends a command whose claim says `typed` with a window-rename notice
  # (ARMONLY below); a session started by an older version has no such mark.
  : >"$SD/notice"
  # The secrets (rr.sh: the pane process opens these and removes their names before the shell
  # starts): the session's mark secret, and the file each start writes a command's notice
  # secret into.
  printf '%s\n' "${MARK-}" >"$SD/marks.key" && : >"$SD/notice.key" || exit 3
  printf '%s' "$CWD" >"$SD/cwd"
  # The engine's extra environment (HOME in tests, for one) holds for the login shell too.
  eval "$SESSION_ENV"
  if [ "$LOGINENV" = 1 ]; then rr_login_env; else echo "env=off"; fi
  rr_sd=$(rr_tmux_literal "$SD")
  rr_limit=$((ENVBOUND + 20))
  if [ -n "${NODE_STEP-}" ]; then rr_start_on_node; else
    # The server's default-shell runs pipe-pane and run-shell jobs: keep the user's login shell
    # (fish, tcsh, ...) out of it.
    SHELL=/bin/sh rr_tmux -f /dev/null new-session -d -s "$SID" -x "$COLS" -y "$ROWS" -c "$rr_sd" -- \
      "$BASH" --noprofile --norc "$SD/rr.sh" pane \; \
      pipe-pane -o -t "=$SID:" "exec cat >> '$(rr_tmux_literal "$SD")/transcript.raw'" || exit 3
    rr_fast_wake
    if ! timeout "$rr_limit" "$T" -L "$S" wait-for "rr-$SID-ready"; then
      # A server that is gone crashed or was killed: not a shell that is slow to start.
      rr_tmux has-session -t "=$SID" 2>/dev/null || echo @server-gone
      exit 4
    fi
  fi
  echo @ready
}

# The owner of the foreground lock into rr_o (empty when free).
rr_read_lock() {
  rr_o=
  read -r rr_o 2>/dev/null <"$SD/busy"
  if [ -z "$rr_o" ] && [ -L "$SD/busy" ]; then rr_o=$(readlink "$SD/busy" 2>/dev/null); fi
}

# Take the session's foreground lock for $ID (dir $D), or print "@busy <owner>", remove $D and
# exit. The lock is $SD/busy, a file holding the owner's command id, created with noclobber
# (O_EXCL: atomic, and a builtin). An owner removes its lock just after its exit file and wake-up,
# so a lock whose owner has an exit file is about to go: wait for that (5 ms steps); one still
# there after half a second is stale (its shell died in between) and is reclaimed.
rr_take_lock() {
  set -C
  rr_i=0
  rr_e=0
  until { printf '%s\n' "$ID" >"$SD/busy"; } 2>/dev/null; do
    rr_read_lock
    if [ -z "$rr_o" ] && [ ! -e "$SD/busy" ] && [ ! -L "$SD/busy" ]; then continue; fi
    # Empty: another start has just created it and is writing its id (one printf); read again
    # to learn the owner, which a refusal names.
    if [ -z "$rr_o" ] && [ "$rr_e" -lt 100 ]; then
      rr_e=$((rr_e + 1))
      continue
    fi
    if [ -n "$rr_o" ] && ! rr_ended "$CD/$rr_o" && rr_replaced "$rr_o"; then continue; fi
    if [ -z "$rr_o" ] || ! rr_ended "$CD/$rr_o"; then
      rm -rf -- "$D"
      echo "@busy $rr_o"
      exit 0
    fi
    if [ "$rr_i" -ge 100 ]; then rm -f -- "$SD/busy"; else sleep 0.005; fi
    rr_i=$((rr_i + 1))
  done
  set +C
}

# The foreground process group of the session shell's terminal into rr_fg (the shell's own
# pid when it is at its prompt); rr_p is the shell's pid. (LEADPID: the pid file of another
# terminal's first process instead: a background command's own window.)
rr_terminal_group() {
  rr_fg=
  rr_p=
  rr_pp=
  rr_lead=${LEADPID:-$SD/shell.pid}
  [ -r "$rr_lead" ] && read -r rr_p <"$rr_lead" && [ -r "/proc/$rr_p/stat" ] || return 1
  read -r rr_st <"/proc/$rr_p/stat" || return 1
  rr_st=${rr_st##*) }
  # shellcheck disable=SC2086 # fields of /proc/PID/stat
  set -- $rr_st
  rr_pp=$2
  rr_fg=$6
}

# rr_replaced OWNER: when the session shell was replaced by a command (`exec bash`: same pid,
# another command line), that command (OWNER, holding the lock without an exit file) is over:
# record it as ended by shell_replaced, wake its waiters, release the lock. Rare path only.
rr_replaced() {
  [ -n "$1" ] && [ -r "$SD/shell.cmdline" ] && rr_terminal_group || return 1
  rr_want=
  IFS= read -r rr_want <"$SD/shell.cmdline" || [ -n "$rr_want" ] || return 1
  rr_have=$(tr '\000' ' ' <"/proc/$rr_p/cmdline" 2>/dev/null) || return 1
  [ -n "$rr_have" ] && [ "$rr_want" != "$rr_have" ] || return 1
  if [ -d "$CD/$1" ] && ! rr_ended "$CD/$1"; then
    printf 'code=0 how=shell_replaced state=done ended=%s\n' "$(date +%s.%N)" >"$CD/$1/exit.tmp" \
      && mv -f -- "$CD/$1/exit.tmp" "$CD/$1/exit"
  fi
  printf '%s\n' "$rr_have" >"$SD/shell.cmdline.tmp" && mv -f -- "$SD/shell.cmdline.tmp" "$SD/shell.cmdline"
  set -- "$1" wait-for -S "rr-$1"
  for rr_w in "$CD/$1"/waiters/rr-*; do
    [ -e "$rr_w" ] && set -- "$@" ';' wait-for -S "${rr_w##*/}"
  done
  rr_o=$1
  shift
  rr_tmux "$@" >/dev/null 2>&1
  rm -f -- "$SD/busy"
  return 0
}

# rr_settle: with SETTLE=1 (the engine found the process that recorded the command gone before
# its start was seen here), a command that has not started and whose start never claimed it
# never will: take the claim, so a start arriving late refuses, and record it as ended
# (never_started); wake any waiters.
rr_settle() {
  [ "${SETTLE-}" = 1 ] && [ -d "$D" ] && [ ! -f "$D/started" ] && ! rr_ended "$D" || return 0
  set -C
  if { printf '' >"$D/claim"; } 2>/dev/null; then
    set +C
    printf 'code=255 how=never_started state=done ended=%s\n' "$(date +%s.%N)" >"$D/exit.tmp" \
      && mv -f -- "$D/exit.tmp" "$D/exit"
    set -- wait-for -S "rr-${D##*/}"
    for rr_w in "$D"/waiters/rr-*; do
      [ -e "$rr_w" ] && set -- "$@" ';' wait-for -S "${rr_w##*/}"
    done
    rr_tmux "$@" >/dev/null 2>&1
  fi
  set +C
}

# Print the state of the command in $D as key=value lines after "@report".
rr_report() {
  rr_settle
  if [ "$MODE" != bg ] && [ -d "$D" ] && ! rr_ended "$D"; then
    rr_read_lock
    [ "$rr_o" = "${D##*/}" ] && rr_replaced "$rr_o"
  fi
  echo @report
  [ -d "$D" ] || echo missing=1
  rr_files=started
  if rr_ended "$D"; then rr_files="exit started"; else
    # An exit file that is not one: the command wrote over it; whether it still runs is the
    # lock's and tmux's to say, and its text is never read as an exit.
    if [ -s "$D/exit" ]; then
      echo garbled=1
      rr_read_lock
      [ "$rr_o" = "${D##*/}" ] && echo holds=1
    fi
    rr_a=1
    if [ "$MODE" = bg ]; then
      if [ -f "$D/pid" ]; then read -r rr_pid <"$D/pid"; kill -0 "$rr_pid" 2>/dev/null || rr_a=0; fi
    else
      rr_tmux has-session -t "=$SID" 2>/dev/null || rr_a=0
      # Sleeping on a read of the terminal: it waits for `send`.
      if [ "$rr_a" = 1 ] && [ -f "$D/started" ] && rr_input_wait; then
        rr_read_lock
        if [ "$rr_o" = "${D##*/}" ]; then
          echo "input=1"
          # The line at the terminal's cursor: a prompt written to the terminal itself (a
          # password prompt reads /dev/tty) is in neither output file.
          rr_sl=$(rr_tmux display-message -p -t "=$SID:" '#{cursor_y}' 2>/dev/null)
          case $rr_sl in
          '' | *[!0-9]*) ;;
          *) rr_tmux capture-pane -p -t "=$SID:" -S "$rr_sl" -E "$rr_sl" 2>/dev/null | {
            IFS= read -r rr_l && printf 'screen=%s\n' "$rr_l"
          } ;;
          esac
        fi
      fi
    fi
    echo "alive=$rr_a"
    if [ ! -f "$D/started" ]; then
      rr_read_lock
      if [ "$rr_o" != "${D##*/}" ] && [ -n "$(find "$D/cmd.sh" -mmin +1 2>/dev/null)" ]; then
        echo never=1
      fi
    fi
  fi
  for rr_f in $rr_files; do
    [ -f "$D/$rr_f" ] && while IFS= read -r rr_l; do printf '%s\n' "$rr_l"; done <"$D/$rr_f"
  done
  [ -f "$D/pid" ] && read -r rr_pid <"$D/pid" && echo "pid=$rr_pid"
  if [ -s "$D/stdout" ] || [ -s "$D/stderr" ]; then
    echo @sizes
    wc -c "$D/stdout" "$D/stderr" 2>/dev/null
  fi
  # The directory the command started in: last, raw, up to the end of the reply.
  if [ -f "$D/pwd" ]; then
    echo @pwd
    while IFS= read -r rr_l || [ -n "$rr_l" ]; do printf '%s\n' "$rr_l"; done <"$D/pwd"
  fi
  exit 0
}

# rr_input_watch CHANNEL DELAY: in the background, once the foreground command in $D sleeps
# reading the terminal, signal CHANNEL (a waiting caller then reports `waiting_input`), checking
# every 0.1 s after DELAY; its pid in rr_watcher. Stopped by the caller with KILL (the caller
# ignores TERM, and so would it).
rr_input_watch() {
  (
    sleep "$2"
    while ! rr_ended "$D"; do
      if [ -f "$D/started" ] && rr_input_wait; then
        rr_tmux wait-for -S "$1" 2>/dev/null
        exit 0
      fi
      sleep 0.1
    done
  ) </dev/null >/dev/null 2>&1 &
  rr_watcher=$!
}

# start_command: lock, check the terminal is at the shell, type the fixed line, wait for the
# command's end (foreground) or launch (background) on its channel, report. The command text is
# already in $D/cmd.sh, or comes as CMDTEXT; a cwd override goes to $D/cwd and extra environment (export lines the
# engine made) to $D/env.sh, as data, never typed.
rr_start_command() {
  trap '' HUP PIPE INT TERM
  # A session whose shell cannot end a typed command with a notice (started by an older
  # version): nothing is done, and the caller starts the command without its control client.
  if [ "${ARMONLY-}" = 1 ] && ! rr_keyed; then
    echo @untyped
    exit 0
  fi
  # A small command's text comes in the call (CMDTEXT), not as a file written beforehand; the
  # command directory was made over SFTP (no mkdir process here).
  if [ -n "${CMDTEXT+set}" ]; then
    printf '%s' "$CMDTEXT" >"$D/cmd.sh" || exit 3
  fi
  # The claim (O_EXCL): this start, or a look that settled the command as never started (its
  # caller died before this call arrived: `report` with SETTLE=1), whichever came first.
  # ARMONLY: the caller types the line through a tmux control client it keeps (no tmux process
  # here), and learns of the end from it; the claim says so ("typed"), and the session shell
  # then ends the command by renaming its window rq-ID. (In the claim rather than a file of its
  # own: one file fewer to create on every command.)
  rr_claim=
  if [ "${ARMONLY-}" = 1 ]; then rr_claim=typed; fi
  set -C
  if ! { printf '%s' "$rr_claim" >"$D/claim"; } 2>/dev/null; then
    set +C
    echo @started
    rr_report
  fi
  set +C
  rr_take_lock
  if [ "$HASCWD" = 1 ]; then printf '%s' "$CWD" >"$D/cwd"; fi
  if [ "${BGWIN-}" = 1 ]; then : >"$D/window.want"; fi
  if [ -n "${CMDENV-}" ]; then printf '%s' "$CMDENV" >"$D/env.sh"; fi
  if rr_terminal_group; then
    rr_i=0
    while [ "$rr_fg" != "$rr_p" ] && [ "$rr_fg" -gt 0 ] 2>/dev/null; do
      if [ "$rr_i" -ge 25 ]; then
        rm -rf -- "$SD/busy" "$D"
        read -r rr_n <"/proc/$rr_fg/comm"
        echo "@term $rr_n"
        exit 0
      fi
      rr_i=$((rr_i + 1))
      sleep 0.02
      rr_terminal_group || break
    done
    # A command replaced the session shell (`exec zsh`): its line would not mean the same there.
    if [ -r "$SD/shell.comm" ] && read -r rr_want <"$SD/shell.comm" && read -r rr_have <"/proc/$rr_p/comm" \
      && [ "$rr_want" != "$rr_have" ]; then
      rm -rf -- "$SD/busy" "$D"
      echo "@term $rr_have"
      exit 0
    fi
  fi
  rr_give_key
  if [ "${ARMONLY-}" = 1 ]; then
    echo @armed
    exit 0
  fi
  rr_type_command
}

# type_command: type the fixed line of an armed command (its lock taken) and wait, as
# start_command does; for a caller whose control client failed to type it.
rr_type_command() {
  trap '' HUP PIPE INT TERM
  rr_channel
  if [ -s "$D/claim" ]; then : >"$D/claim"; fi
  rr_watcher=
  if [ "$MODE" != bg ]; then rr_input_watch "$CH" 0.3; fi
  rr_tmux send-keys -t "=$SID:" C-e C-u \; send-keys -t "=$SID:" -l -- "$LINE" \; \
    send-keys -t "=$SID:" Enter \; wait-for "$CH" 2>/dev/null
  rr_w=$?
  if [ -n "$rr_watcher" ]; then kill -KILL "$rr_watcher" 2>/dev/null; fi
  if [ $rr_w -ne 0 ] && [ ! -e "$D/started" ] && ! rr_tmux has-session -t "=$SID" 2>/dev/null; then
    rm -rf -- "$SD/busy" "$D"
    echo @lost
    exit 0
  fi
  echo @started
  rr_report
}

# signal: wake a channel (ends a bounded wait from the caller's side).
rr_signal() {
  # (Both forms: the start may be waiting on the plain one, rr_give_key.)
  case $CH in
  rr-*-k*) rr_tmux wait-for -S "$CH" \; wait-for -S "${CH%-k*}" 2>/dev/null ;;
  *) rr_tmux wait-for -S "$CH" 2>/dev/null ;;
  esac
  exit 0
}

# wait_command: wait up to SECS on a waiter channel of our own, then report.
rr_wait_command() {
  rr_ch=rr-$ID-w$$
  [ -d "$D" ] && mkdir -p -- "$D/waiters" && : >"$D/waiters/$rr_ch"
  if [ "$MODE" = bg ]; then
    rr_running() { [ ! -f "$D/pid" ] || { read -r rr_pid <"$D/pid" && kill -0 "$rr_pid" 2>/dev/null; }; }
  else
    rr_running() { rr_tmux has-session -t "=$SID" 2>/dev/null; }
  fi
  # An exit file the command wrote over, and the lock is no longer its own: it is over.
  rr_over=0
  if [ "$MODE" != bg ] && [ -s "$D/exit" ] && ! rr_ended "$D"; then
    rr_read_lock
    [ "$rr_o" = "${D##*/}" ] || rr_over=1
  fi
  rr_watcher=
  if [ "$MODE" != bg ] && [ "$rr_over" = 0 ] && [ -f "$D/started" ] && ! rr_ended "$D" && rr_input_wait; then
    : # waiting for input already: report at once
  elif [ -d "$D" ] && [ "$rr_over" = 0 ] && ! rr_ended "$D" && rr_running; then
    if [ "$MODE" != bg ]; then rr_input_watch "$rr_ch" 0.1; fi
    timeout "$SECS" "$T" -L "$S" wait-for "$rr_ch" 2>/dev/null
    rr_w=$?
    if [ -n "$rr_watcher" ]; then kill -KILL "$rr_watcher" 2>/dev/null; fi
    if [ $rr_w -ne 0 ] && [ $rr_w -ne 124 ] && ! rr_ended "$D" && [ -f "$D/pid" ]; then
      read -r rr_pid <"$D/pid"
      # shellcheck disable=SC2016 # expanded by that sh
      timeout "$SECS" sh -c 'while [ ! -s "$1/exit" ] && kill -0 "$2" 2>/dev/null; do sleep 0.2; done' _ "$D" "$rr_pid"
    fi
  fi
  rm -f -- "$D/waiters/$rr_ch"
  rr_report
}

# Wait up to GRACE seconds for the exit file, on our own channel (poll if the channel failed).
rr_stop_wait() {
  rr_ended "$D" && return 0
  timeout "$GRACE" "$T" -L "$S" wait-for "$rr_ch" 2>/dev/null
  rr_w=$?
  if [ $rr_w -ne 0 ] && [ $rr_w -ne 124 ]; then
    rr_i=0
    while ! rr_ended "$D" && [ "$rr_i" -lt $((GRACE * 10)) ]; do sleep 0.1; rr_i=$((rr_i + 1)); done
  fi
}

# stop_command: foreground Ctrl-C, then TERM and KILL to the terminal's foreground group, then
# KILL of the shell (the pane restarts it); background TERM then KILL to its process group.
rr_stop_command() {
  rr_ch=rr-$ID-s$$
  if ! rr_ended "$D" && [ -d "$D" ]; then
    : >"$D/stop_requested"
    mkdir -p -- "$D/waiters" && : >"$D/waiters/$rr_ch"
    if [ "$MODE" = bg ]; then
      rr_i=0
      while [ ! -f "$D/pid" ] && ! rr_ended "$D" && [ $rr_i -lt 50 ]; do sleep 0.1; rr_i=$((rr_i + 1)); done
      if ! rr_ended "$D" && read -r rr_pid <"$D/pid"; then
        kill -TERM "-$rr_pid" 2>/dev/null
        rr_stop_wait
        if ! rr_ended "$D"; then
          kill -KILL "-$rr_pid" 2>/dev/null
          sleep 0.1
          if ! rr_ended "$D"; then
            printf 'code=137 how=killed state=stopped ended=%s\n' "$(date +%s.%N)" >"$D/exit.tmp" \
              && mv -f -- "$D/exit.tmp" "$D/exit"
          fi
        fi
        rr_i=0
        while kill -0 "-$rr_pid" 2>/dev/null && [ $rr_i -lt $((GRACE * 10)) ]; do sleep 0.1; rr_i=$((rr_i + 1)); done
        kill -KILL "-$rr_pid" 2>/dev/null
      fi
    else
      rr_tmux send-keys -t "=$SID:" C-c 2>/dev/null
      rr_stop_wait
      if ! rr_ended "$D" && rr_terminal_group; then
        if [ "$rr_fg" != "$rr_p" ] && [ "$rr_fg" -gt 0 ] 2>/dev/null; then
          kill -TERM "-$rr_fg" 2>/dev/null
          rr_stop_wait
          rr_ended "$D" || { kill -KILL "-$rr_fg" 2>/dev/null; rr_stop_wait; }
        fi
        rr_ended "$D" || { kill -KILL "$rr_p" 2>/dev/null; rr_stop_wait; }
      fi
    fi
    rm -f -- "$D/waiters/$rr_ch"
  fi
  rr_report
}

# wait_output: until the command ends or its output grows past the given offsets (bounded).
# Checks every 10 ms for the first 0.2 s (a reader that caught up with a fast writer), then
# every 0.1 s.
rr_wait_output() {
  # INPUT=1 (a foreground command not yet known to wait for input): also end as soon as it
  # sleeps reading the terminal (the `watch` loop, TICKS checks).
  if [ "${INPUT-}" = 1 ]; then
    F1=$D/stdout O1=$OUT F2=$D/stderr O2=$ERR EXIT=$D/exit CALM=2
    rr_watch
  fi
  # shellcheck disable=SC2016 # expanded by that sh
  timeout "$SECS" sh -c 'i=0; while [ ! -f "$1/exit" ] && [ "$(wc -c < "$1/stdout" 2>/dev/null || echo 0)" -le "$2" ] && [ "$(wc -c < "$1/stderr" 2>/dev/null || echo 0)" -le "$3" ]; do if [ $i -lt 20 ]; then sleep 0.01; else sleep 0.1; fi; i=$((i + 1)); done' _ "$D" "$OUT" "$ERR"
  exit 0
}

# rr_size FILE: its size in bytes into rr_sz (0 when it is missing).
rr_size() {
  rr_sz=0
  [ -f "$1" ] && rr_sz=$(wc -c <"$1" 2>/dev/null)
  rr_sz=$((${rr_sz:-0} + 0))
}

# rr_reads_terminal PID: the process sleeps reading the session's terminal. Its kernel wait
# channel says where it sleeps: in a read (n_tty_read, or wait_woken inside it), or in a
# select/poll (a readline prompt: bash's, python's). Where /proc/PID/syscall is readable (not
# under Yama's ptrace restriction) it must also be the terminal that is waited on: a read's file
# descriptor is the terminal (a file opened as /dev/tty shows as the terminal itself), or a
# select watches only descriptor 0 (nfds 1) and that is the terminal; this rules out a socket
# read, which also sleeps in wait_woken, and a program polling sockets. (`-ef` is not POSIX,
# but dash, bash and busybox sh all have it.)
rr_reads_terminal() {
  rr_wc=
  IFS= read -r rr_wc <"/proc/$1/wchan" 2>/dev/null
  case $rr_wc in
  n_tty_read | wait_woken) rr_kind=tty_read ;;
  poll_schedule_timeout* | do_select | core_sys_select* | do_sys_poll) rr_kind=select ;;
  *) return 1 ;;
  esac
  rr_a0=
  IFS=' ' read -r _ rr_a0 _ <"/proc/$1/syscall" 2>/dev/null
  case $rr_a0 in
  '') [ "$rr_kind" = tty_read ] && return 0 ;;
  0x[0-9a-f] | 0x[0-9a-f][0-9a-f] | 0x[0-9a-f][0-9a-f][0-9a-f]) ;;
  *) return 1 ;;
  esac
  if [ "$rr_kind" = select ]; then
    [ "$rr_a0" = 0x1 ] || return 1
    rr_a0=0
  fi
  # shellcheck disable=SC3013
  [ "/proc/$1/fd/$((rr_a0))" -ef "/proc/$rr_p/fd/0" ]
}

# rr_input_wait: what holds the session's terminal (its foreground process group: the session
# shell itself for a builtin such as `read`, else a program's group) sleeps reading it: the
# group's leader, one of its children or their children. Decided from the process state,
# never from output.
rr_input_wait() {
  rr_terminal_group || return 1
  [ "$rr_fg" -gt 0 ] 2>/dev/null || return 1
  rr_reads_terminal "$rr_fg" && return 0
  rr_kids=
  read -r rr_kids <"/proc/$rr_fg/task/$rr_fg/children" 2>/dev/null
  for rr_k in $rr_kids; do
    rr_reads_terminal "$rr_k" && return 0
    rr_gk=
    read -r rr_gk <"/proc/$rr_k/task/$rr_k/children" 2>/dev/null
    for rr_g in $rr_gk; do
      rr_reads_terminal "$rr_g" && return 0
    done
  done
  return 1
}

# send: report where output stands (the foreground command and its output sizes, the
# transcript's size), then paste stdin into the pane as typed input (never in argv), then Enter
# if asked, then the tmux key names in KEYS (one a line, checked by the engine against its list;
# `--` so none is read as an option).
rr_send() {
  rr_tmux has-session -t "=$SID" 2>/dev/null || exit 5
  rr_target="=$SID:"
  if [ -n "${BGDIR-}" ]; then
    # A background command's own window (`--stdin`): its id, as tmux printed it at the start.
    rr_win=
    ! rr_ended "$BGDIR" && read -r rr_win <"$BGDIR/window" 2>/dev/null
    case $rr_win in @[0-9]*) rr_target=$rr_win ;; *) exit 7 ;; esac
    rr_o=${BGDIR##*/}
  else
    rr_read_lock
  fi
  if [ -n "$rr_o" ] && [ -d "$CD/$rr_o" ] && ! rr_ended "$CD/$rr_o"; then
    echo "owner=$rr_o"
    rr_size "$CD/$rr_o/stdout"
    rr_out=$rr_sz
    echo "out=$rr_sz"
    rr_size "$CD/$rr_o/stderr"
    rr_err=$rr_sz
    echo "err=$rr_sz"
  else
    rr_o=
  fi
  rr_size "$SD/transcript.raw"
  echo "tr=$rr_sz"
  # Where the transcript and the foreground command's output stood as this input was typed:
  # `session read` puts the input's echo after that output, and the reply after the echo.
  if [ -z "${BGDIR-}" ] && [ -n "$rr_o" ] && [ -d "$CD/$rr_o" ]; then
    printf '%s %s %s\n' "$rr_sz" "$rr_out" "$rr_err" >>"$CD/$rr_o/inputs" 2>/dev/null || :
  fi
  if [ "$HASDATA" = 1 ]; then
    rr_tmux load-buffer -b "$BUF" - \; paste-buffer -d -b "$BUF" -t "$rr_target" || exit 6
  fi
  if [ "$ENTER" = 1 ]; then rr_tmux send-keys -t "$rr_target" Enter || exit 6; fi
  if [ -n "${KEYS-}" ]; then
    rr_ifs=$IFS IFS='
'
    set -f
    # shellcheck disable=SC2086 # one key name a line
    set -- $KEYS
    set +f
    IFS=$rr_ifs
    rr_tmux send-keys -t "$rr_target" -- "$@" || exit 6
  fi
  exit 0
}

# watch: wait up to TICKS checks (0.02 s apart for the first 25, then 0.1 s) until file F1 or
# F2 grows past O1 or O2, the exit file EXIT appears, or (INPUT=1, after CALM checks without
# growth: time for typed input to reach the program) the terminal's program waits for input;
# then print the sizes and what was seen.
rr_watch() {
  rr_i=0
  rr_calm=0
  rr_in=0
  while :; do
    # The exit file first: it is written after the output, so sizes read after it are final.
    # Then F2 (stderr) before F1 (stdout): a program that answers on stdout and then prompts
    # on stderr (Python's REPL) is never seen with the prompt but without the answer.
    rr_x=0
    if [ -n "$EXIT" ] && [ -s "$EXIT" ]; then rr_x=1; fi
    rr_s2=0
    if [ -n "$F2" ]; then rr_size "$F2"; rr_s2=$rr_sz; fi
    rr_size "$F1"
    rr_s1=$rr_sz
    if [ "$rr_s1" -gt "$O1" ] || [ "$rr_s2" -gt "$O2" ] || [ "$rr_x" = 1 ]; then break; fi
    rr_calm=$((rr_calm + 1))
    if [ "$INPUT" = 1 ] && [ "$rr_calm" -ge "${CALM:-2}" ] && rr_input_wait; then rr_in=1; break; fi
    [ "$rr_i" -ge "$TICKS" ] && break
    if [ "$rr_i" -lt 25 ]; then sleep 0.02; else sleep 0.1; fi
    rr_i=$((rr_i + 1))
  done
  if [ "$rr_in" = 0 ] && [ "$rr_x" = 0 ] && rr_input_wait; then rr_in=1; fi
  echo @watch
  echo "s1=$rr_s1"
  echo "s2=$rr_s2"
  echo "exit=$rr_x"
  echo "input=$rr_in"
  exit 0
}

rr_capture() {
  rr_tmux has-session -t "=$SID" 2>/dev/null || exit 5
  rr_tmux display-message -p -t "=$SID:" '#{pane_width} #{pane_height}' \; capture-pane -p -t "=$SID:" || exit 6
  exit 0
}

rr_resize() {
  rr_tmux has-session -t "=$SID" 2>/dev/null || exit 5
  rr_tmux resize-window -t "=$SID:" -x "$COLS" -y "$ROWS" || exit 6
  exit 0
}

rr_alive() {
  rr_tmux has-session -t "=$SID" 2>/dev/null
}

# kill: end the tmux session (the pane does not restart the shell once "closing" is there);
# with PURGE=1 also remove the session's state directory. Prints "@gone" once it is gone.
# Control clients are detached first: tmux 3.3a can crash when a session with a control client
# attached is killed while others are made and killed (docs/reliability.md), and a detached one
# exits instead of staying behind. The session's own server then exits with its last session.
rr_kill() {
  [ -d "$SD" ] && : >"$SD/closing"
  rr_tmux detach-client -s "=$SID" 2>/dev/null
  rr_tmux kill-session -t "=$SID" 2>/dev/null
  if rr_tmux has-session -t "=$SID" 2>/dev/null; then
    echo "@still-running"
    exit 0
  fi
  if [ "$PURGE" = 1 ] && [ -d "$SD" ]; then
    case $SD in
    "$RR_ROOT"/sessions/?*) rm -rf -- "$SD" ;;
    esac
  fi
  echo @gone
  exit 0
}

# prune: keep the newest KEEP command directories of the session (ids are time-ordered);
# remove older ones that have ended. A command still running is never removed.
rr_prune() {
  set -- "$CD"/*
  [ -e "$1" ] || exit 0
  rr_drop=$(($# - KEEP))
  for rr_d in "$@"; do
    [ "$rr_drop" -gt 0 ] || break
    rr_drop=$((rr_drop - 1))
    if rr_ended "$rr_d"; then rm -rf -- "$rr_d"; fi
  done
  exit 0
}

# serve: run calls one after another, each in a subshell with /dev/null as stdin, for as long as
# stdin is open (see engine/src/remote/channels.rs). A call is the line "@rr:call NONCE VERB",
# its parameters, and "@rr:NONCE:end"; its reply ends with "\n@rr:NONCE:done STATUS" on stdout
# and "\n@rr:NONCE:done" on stderr.
rr_serve() {
  while IFS= read -r rr_head; do
    case $rr_head in
    "@rr:call "*) ;;
    *) continue ;;
    esac
    # shellcheck disable=SC2086 # the words of the call line
    set -- $rr_head
    rr_read_params "$2" || exit 0
    (
      eval "$rr_params"
      rr_dispatch "$3"
    ) </dev/null
    rr_s=$?
    printf '\n@rr:%s:done\n' "$2" >&2
    printf '\n@rr:%s:done %s\n' "$2" "$rr_s"
  done
  exit 0
}

rr_dispatch() {
  case $1 in
  prepare) rr_prepare ;;
  sh) rr_sh ;;
  start_session) rr_start_session ;;
  start_command) rr_start_command ;;
  type_command) rr_type_command ;;
  signal) rr_signal ;;
  wait_command) rr_wait_command ;;
  report) rr_report ;;
  stop_command) rr_stop_command ;;
  wait_output) rr_wait_output ;;
  send) rr_send ;;
  watch) rr_watch ;;
  capture) rr_capture ;;
  resize) rr_resize ;;
  alive) rr_alive ;;
  kill) rr_kill ;;
  prune) rr_prune ;;
  *)
    echo "remote-runner: unknown control verb '$1' (a newer remote-runner installed a newer script)" >&2
    exit 95
    ;;
  esac
}

rr_ok=0
rr_read_params "$rr_nonce" && rr_ok=1
printf '@rr:%s:begin\n' "$rr_nonce"
printf '@rr:%s:begin\n' "$rr_nonce" >&2
if [ "$rr_ok" != 1 ]; then
  echo "remote-runner: the parameters of '$rr_verb' were cut short" >&2
  exit 96
fi
if [ "$rr_verb" = serve ]; then rr_serve; fi
eval "$rr_params"
rr_dispatch "$rr_verb"
