//! Sessions, commands, transfers and runs, above the transport. (issues 4, 7)
