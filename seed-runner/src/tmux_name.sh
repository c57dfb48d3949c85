# seed-runner: give a session the spec's `tmux_session` name as a real session on the user's
# default tmux server (POSIX sh). Prefixed by tmux_name.rs with T= (tmux path), S= (the
# engine's socket name), E= (the engine's tmux session), N= (`seed_<session_id>`) and A= (the
# pane's program, tmux_attach.sh). The session is tagged with the engine's (@seed_engine), so
# that it is only ever removed for that one. Exit 3 when the name is taken.
# shellcheck shell=sh disable=SC2154
if ! seed_err=$("$T" new-session -d -s "$N" -- /bin/sh -c "$A" seed-attach "$T" "$S" "$E" \; \
  set-option -t "=$N:" @seed_engine "$E" 2>&1 >/dev/null); then
  case $seed_err in
    *"duplicate session"*) exit 3 ;;
  esac
  printf '%s\n' "$seed_err" >&2
  exit 1
fi
