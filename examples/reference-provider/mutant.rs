//! Deliberate defects, one at a time, to prove that the conformance harness catches them.
//! Chosen with `--mutant NAME` or `REFERENCE_PROVIDER_MUTANT=NAME`.

/// One defect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// progress before the busy ACK.
    ProgressBeforeAck,
    /// Two busy ACKs for one turn.
    TwoAcks,
    /// A post-ACK failure carrying only the requestId (instead of the final).
    PostAckFailureWithoutTurnId,
    /// A rebuild that keeps the generation.
    RebuildSameGeneration,
    /// A new remoteSessionId at the same generation on every final.
    ChangedRemoteSessionId,
    /// `providerState.accessToken` in the state.
    AccessTokenInState,
    /// A terminal_screen for a future generation.
    FutureScreen,
    /// The final right after the outbound_message, without waiting for its result.
    FinalBeforeOutboundResult,
    /// A log line on stdout.
    StdoutNoise,
    /// cancel is never answered.
    IgnoreCancel,
    /// hello answers with another requestId.
    HelloWrongRequestId,
    /// The same capability twice in hello.
    DuplicateCapabilities,
    /// final.usage for another generation.
    UsageGenerationMismatch,
    /// ready without requestId.
    ReadyWithoutRequestId,
    /// A status for a requestId the host never sent.
    StatusUnknownRequestId,
    /// A status answering outbound_message_result.
    ReplyToOutboundResult,
    /// A failure without requestId or turnId for a turn before start.
    UncorrelatedTurnFailure,
    /// A second turn is ACKed while one runs.
    AcceptSecondTurn,
    /// A terminal_screen right after a rebuild's ready (like the host's own runner).
    ScreenAfterRebuildReady,
    /// Exits on invalid JSON.
    ExitOnInvalidJson,
    /// Keeps running after stdin closes.
    NoExitOnEof,
    /// terminal_input for any generation is accepted.
    AnyGenerationInput,
    /// agentThreadId dropped on rebuild.
    ForgetThreadOnRebuild,
    /// hello without the reattach capability.
    MissingReattach,
    /// cancel answered with status detached.
    CancelAnsweredDetached,
    /// Stops reading stdin after start (never answers again).
    StopReadingAfterStart,
    /// SIGTERM, SIGINT and SIGHUP are caught and ignored: the process lives on while stdin
    /// stays open (what BotMux's close does), the defect of a loop that only ends on EOF.
    IgnoreStopSignals,
    /// `start` takes 3 s and the loop waits on it: nothing else is answered meanwhile.
    SlowStartBlocksLoop,
    /// SIGTERM is noticed only after a command was handled, and `start` takes 3 s: a signal
    /// during a start ends the process only after it (the defect of a loop that checks for
    /// signals between commands).
    SignalWaitsForStart,
    /// SIGTERM writes half a `ready` line, then exits: what the provider printed before it
    /// exited is no longer a whole protocol line.
    TornLineOnSignal,
    /// Not a defect the host punishes: screens that repeat a sequence or belong to an older
    /// generation, which the host ignores (the harness reports warnings, not failures).
    IgnoredScreens,
    /// Every turn is refused before the ACK with `not_ready`, as if the session never got
    /// ready (what a host that sends the turn before `ready` gets).
    RefuseTurns,
    /// A command type protocol v1 does not have is answered with an event type v1 does not
    /// have (instead of `failure` / `unsupported_command`): a protocol error for the host.
    UnknownEventForUnknownCommand,
}

impl Mutant {
    /// Every mutant with its name.
    pub const ALL: [(&'static str, Mutant); 33] = [
        ("progress-before-ack", Mutant::ProgressBeforeAck),
        ("two-acks", Mutant::TwoAcks),
        (
            "post-ack-failure-without-turn-id",
            Mutant::PostAckFailureWithoutTurnId,
        ),
        ("rebuild-same-generation", Mutant::RebuildSameGeneration),
        ("changed-remote-session-id", Mutant::ChangedRemoteSessionId),
        ("access-token-in-state", Mutant::AccessTokenInState),
        ("future-screen", Mutant::FutureScreen),
        (
            "final-before-outbound-result",
            Mutant::FinalBeforeOutboundResult,
        ),
        ("stdout-noise", Mutant::StdoutNoise),
        ("ignore-cancel", Mutant::IgnoreCancel),
        ("hello-wrong-request-id", Mutant::HelloWrongRequestId),
        ("duplicate-capabilities", Mutant::DuplicateCapabilities),
        ("usage-generation-mismatch", Mutant::UsageGenerationMismatch),
        ("ready-without-request-id", Mutant::ReadyWithoutRequestId),
        ("status-unknown-request-id", Mutant::StatusUnknownRequestId),
        ("reply-to-outbound-result", Mutant::ReplyToOutboundResult),
        ("uncorrelated-turn-failure", Mutant::UncorrelatedTurnFailure),
        ("accept-second-turn", Mutant::AcceptSecondTurn),
        (
            "screen-after-rebuild-ready",
            Mutant::ScreenAfterRebuildReady,
        ),
        ("exit-on-invalid-json", Mutant::ExitOnInvalidJson),
        ("no-exit-on-eof", Mutant::NoExitOnEof),
        ("any-generation-input", Mutant::AnyGenerationInput),
        ("forget-thread-on-rebuild", Mutant::ForgetThreadOnRebuild),
        ("missing-reattach", Mutant::MissingReattach),
        ("cancel-answered-detached", Mutant::CancelAnsweredDetached),
        ("stop-reading-after-start", Mutant::StopReadingAfterStart),
        ("ignored-screens", Mutant::IgnoredScreens),
        ("ignore-stop-signals", Mutant::IgnoreStopSignals),
        ("slow-start-blocks-loop", Mutant::SlowStartBlocksLoop),
        ("signal-waits-for-start", Mutant::SignalWaitsForStart),
        ("torn-line-on-signal", Mutant::TornLineOnSignal),
        ("refuse-turns", Mutant::RefuseTurns),
        (
            "unknown-event-for-unknown-command",
            Mutant::UnknownEventForUnknownCommand,
        ),
    ];

    /// Parses a mutant name.
    pub fn parse(name: &str) -> Result<Mutant, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown mutant {name:?}; known: {}", names.join(", "))
            })
    }
}
