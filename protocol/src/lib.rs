//! BotMux remote-runner protocol v1.
