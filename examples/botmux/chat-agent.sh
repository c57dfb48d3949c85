#!/bin/sh
# An agent command that talks to the chat while it works, for botmux-remote-runner's agent mode:
#
#   REMOTE_RUNNER_TURN_MODE=agent
#   REMOTE_RUNNER_AGENT_COMMAND='sh /path/on/the/machine/chat-agent.sh'
#
# The turn's message arrives on stdin; what this prints on stdout is the reply (final). During
# the turn, "$RR_CHAT" posts to the chat and reads its context:
#   "$RR_CHAT" send TEXT     a progress message; exit 0 and the message id when delivered,
#                            3 rejected (nothing posted), 4 unknown (may have been posted)
#   "$RR_CHAT" history ...   recent messages (a session tool): the tool's stdout and exit code
# A real agent would call its model here; this one shows the calls and their exit codes.
set -u

request=$(cat)

if id=$("$RR_CHAT" send "Working on: $request"); then
  echo "posted progress as $id" >&2
else
  echo "progress not posted (exit $?)" >&2
fi

if history=$("$RR_CHAT" history --limit 3); then
  :
else
  history="(history unavailable: exit $?)"
fi

printf 'You asked: %s\nRecent chat: %s\n' "$request" "$history"
