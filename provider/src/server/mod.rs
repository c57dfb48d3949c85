//! The botmux-remote-runner JSONL loop and turn state machine. (issue 5)
