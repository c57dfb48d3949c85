//! Round trip for every type: generate valid values, encode, decode, compare.

use base64::Engine as _;
use proptest::option;
use proptest::prelude::*;
use remote_runner_protocol::*;
use serde_json::{Map, Value};

fn request_id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9._:-]{0,40}"
}

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9._:/-]{0,40}"
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._-]{0,20}"
}

fn free_id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9\u{4e00}-\u{4e10}][ -~]{0,30}"
}

fn text() -> impl Strategy<Value = String> {
    ".{0,40}"
}

fn label() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][ -~]{0,20}[A-Za-z0-9]"
}

fn code() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._-]{0,30}"
}

fn generation() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..10, Just(MAX_SAFE_INTEGER), 0..=MAX_SAFE_INTEGER]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        text().prop_map(Value::from),
    ]
}

fn safe_key() -> impl Strategy<Value = String> {
    "[a-z][a-zA-Z0-9_]{0,10}".prop_filter("credential-like", |k| sensitive_word(k).is_none())
}

fn provider_state() -> impl Strategy<Value = Map<String, Value>> {
    let value = json_leaf().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(safe_key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map(safe_key(), value, 0..5).prop_map(|m| m.into_iter().collect())
}

fn state() -> impl Strategy<Value = State> {
    (
        name(),
        generation(),
        option::of(id()),
        option::of(id()),
        option::of(provider_state()),
    )
        .prop_map(|(provider, generation, rsid, thread, ps)| State {
            version: 1,
            provider,
            generation,
            remote_session_id: rsid,
            agent_thread_id: thread,
            provider_state: ps,
        })
}

fn tokens() -> impl Strategy<Value = TokenCounts> {
    (0..=MAX_SAFE_INTEGER, 0..=MAX_SAFE_INTEGER)
        .prop_map(|(input, output)| TokenCounts { input, output })
}

fn usage(generation: u64) -> impl Strategy<Value = Usage> {
    let context = (
        0..=MAX_SAFE_INTEGER,
        option::of(1..=MAX_SAFE_INTEGER),
        option::of(prop_oneof![0.0f64..=100.0, Just(3.0), Just(100.0)]),
    )
        .prop_map(|(used_tokens, window_tokens, percent_used)| ContextUsage {
            used_tokens,
            window_tokens,
            percent_used,
        });
    (
        option::of(context),
        option::of(tokens()),
        option::of(option::of(tokens())),
        option::of(label()),
        option::of(label()),
        option::of(label()),
    )
        .prop_map(
            move |(context, tokens, turn_tokens, model, effort, variant)| Usage {
                generation,
                snapshot: UsageSnapshot {
                    context,
                    tokens,
                    turn_tokens,
                    model,
                    reasoning_effort: effort,
                    model_backend_variant: variant,
                },
            },
        )
}

fn image() -> impl Strategy<Value = OutboundImage> {
    let kinds = prop_oneof![
        Just(("image/png", b"\x89PNG\r\n\x1a\n".to_vec())),
        Just(("image/jpeg", vec![0xFF, 0xD8, 0xFF])),
        Just(("image/gif", b"GIF87a".to_vec())),
        Just(("image/webp", b"RIFF\0\0\0\0WEBP".to_vec())),
    ];
    (
        kinds,
        prop::collection::vec(any::<u8>(), 0..64),
        "[a-z0-9_-]{1,12}\\.[a-z]{3}",
    )
        .prop_map(|((mime, magic), tail, name)| {
            let mut bytes = magic;
            bytes.extend(tail);
            OutboundImage::from_bytes(name, mime, &bytes)
        })
}

fn session_tool_request() -> impl Strategy<Value = SessionToolRequest> {
    let scope = prop_oneof![
        Just(HistoryScope::Session),
        Just(HistoryScope::Thread),
        Just(HistoryScope::Chat),
        Just(HistoryScope::Ambient),
    ];
    prop_oneof![
        (
            option::of(1u64..=100),
            option::of(scope),
            option::of(any::<bool>())
        )
            .prop_map(
                |(limit, scope, with_card_json)| SessionToolRequest::History {
                    limit,
                    scope,
                    with_card_json
                }
            ),
        ("om_[A-Za-z0-9_-]{1,20}", option::of(any::<bool>()))
            .prop_map(|(message_id, raw)| SessionToolRequest::Quoted { message_id, raw }),
        Just(SessionToolRequest::BotsList),
        Just(SessionToolRequest::SkillList),
        id().prop_map(|name| SessionToolRequest::SkillShow { name }),
        id().prop_map(|name| SessionToolRequest::SkillResources { name }),
        (id(), "[a-z0-9_-]{1,8}(/[a-z0-9_.-]{0,4}[a-z0-9]){0,3}")
            .prop_map(|(name, path)| SessionToolRequest::SkillRead { name, path }),
    ]
}

fn failure_status() -> impl Strategy<Value = FailureStatus> {
    prop_oneof![
        Just(FailureStatus::Failed),
        Just(FailureStatus::Ambiguous),
        Just(FailureStatus::Cancelled)
    ]
}

fn session_status() -> impl Strategy<Value = SessionStatus> {
    prop_oneof![
        Just(SessionStatus::Starting),
        Just(SessionStatus::Ready),
        Just(SessionStatus::Busy),
        Just(SessionStatus::Closed),
        Just(SessionStatus::Detached),
        Just(SessionStatus::Error),
    ]
}

fn capabilities() -> impl Strategy<Value = Vec<String>> {
    prop::collection::btree_set(name(), 0..8).prop_map(|s| s.into_iter().collect())
}

fn event() -> impl Strategy<Value = Event> {
    let final_event = (
        free_id(),
        text(),
        option::of(state()),
        any::<bool>(),
        generation(),
    )
        .prop_flat_map(|(turn_id, content, state, with_usage, other_generation)| {
            let g = state.as_ref().map_or(other_generation, |s| s.generation);
            let usage = if with_usage {
                usage(g).prop_map(Some).boxed()
            } else {
                Just(None).boxed()
            };
            usage.prop_map(move |usage| {
                Event::final_result(turn_id.clone(), content.clone(), state.clone(), usage)
            })
        });
    prop_oneof![
        (request_id(), name(), capabilities()).prop_map(|(r, p, c)| Event::hello(r, p, c)),
        (request_id(), state()).prop_map(|(r, s)| Event::ready(r, s)),
        (free_id(), text()).prop_map(|(t, c)| Event::progress(t, c)),
        final_event,
        (
            option::of(request_id()),
            option::of(free_id()),
            code(),
            label(),
            failure_status(),
            any::<bool>()
        )
            .prop_map(|(r, t, c, m, s, retry)| Event::failure(r, t, c, m, s, retry)),
        state().prop_map(Event::lineage_changed),
        "https?://[a-z]{1,10}(\\.[a-z]{2,5})?(:[0-9]{2,4})?(/[a-z0-9]{0,8})?"
            .prop_map(Event::access_url),
        (generation(), generation(), 1u64..=1000, 1u64..=1000, text())
            .prop_map(|(g, s, c, r, snap)| Event::terminal_screen(g, s, c, r, snap)),
        (request_id(), session_status(), option::of(state()))
            .prop_map(|(r, s, st)| Event::status(r, s, st)),
        (
            id(),
            id(),
            generation(),
            "[A-Za-z0-9\u{4e00}-\u{9fff}][^\n]{0,20}",
            prop_oneof![Just(ResponseKind::Progress), Just(ResponseKind::Auxiliary)],
            prop_oneof![Just(Mention::None), Just(Mention::Requester)],
            option::of(prop::collection::vec(image(), 0..=4))
        )
            .prop_map(|(op, t, g, content, kind, mention, images)| {
                let mut event = Event::outbound_message(op, t, g, content, kind, mention);
                if let Event::OutboundMessage(e) = &mut event {
                    e.images = images;
                }
                event
            }),
        (id(), id(), generation(), session_tool_request())
            .prop_map(|(op, t, g, req)| Event::session_tool(op, t, g, req)),
    ]
}

fn model_backend_variant() -> impl Strategy<Value = ModelBackendVariant> {
    prop_oneof![
        Just(ModelBackendVariant::Standard),
        Just(ModelBackendVariant::Max)
    ]
}

fn trusted_caller() -> impl Strategy<Value = TrustedCaller> {
    (
        option::of(id()),
        option::of(id()),
        option::of(id()),
        option::of(Just(CallerSource::ScheduleCreator)),
        option::of(id()),
        option::of(prop_oneof![Just(SenderType::User), Just(SenderType::Bot)]),
    )
        .prop_map(|(open, union, app, source, task, sender)| TrustedCaller {
            request_user_open_id: open,
            request_user_union_id: union,
            request_lark_app_id: app,
            source,
            task_id: task,
            sender_type: sender,
        })
}

fn outbound_result() -> impl Strategy<Value = OutboundResult> {
    prop_oneof![
        "om_[a-z0-9]{1,10}".prop_map(|message_id| OutboundResult::Delivered { message_id }),
        (code(), label()).prop_map(|(code, message)| OutboundResult::Rejected { code, message }),
        (code(), label()).prop_map(|(code, message)| OutboundResult::Unknown { code, message }),
    ]
}

fn tool_result() -> impl Strategy<Value = SessionToolResult> {
    let attachments = prop::collection::vec(
        (
            "[a-z]{1,8}\\.[a-z]{2,3}",
            prop_oneof![Just(AttachmentKind::Image), Just(AttachmentKind::File)],
            option::of(Just("application/octet-stream".to_owned())),
            prop::collection::vec(any::<u8>(), 0..32),
        ),
        0..=8,
    )
    .prop_map(|items| {
        items
            .into_iter()
            .enumerate()
            .map(|(i, (name, kind, mime_type, bytes))| Attachment {
                placeholder: format!("{ATTACHMENT_PLACEHOLDER_PREFIX}{i}"),
                name,
                kind,
                mime_type,
                data_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
            })
            .collect::<Vec<_>>()
    });
    prop_oneof![
        (-255i64..=255, text(), text(), option::of(attachments)).prop_map(
            |(exit_code, stdout, stderr, attachments)| SessionToolResult::Completed {
                exit_code,
                stdout,
                stderr,
                attachments
            }
        ),
        (code(), label()).prop_map(|(code, message)| SessionToolResult::Rejected { code, message }),
        (code(), label()).prop_map(|(code, message)| SessionToolResult::Unknown { code, message }),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    let hints = || {
        (
            option::of(label()),
            option::of(model_backend_variant()),
            option::of(label()),
        )
    };
    prop_oneof![
        (request_id(), label(), capabilities()).prop_map(|(request_id, session_id, caps)| {
            Command::Hello(HelloCommand {
                request_id,
                session_id,
                required_capabilities: caps,
            })
        }),
        (request_id(), label(), label(), hints()).prop_map(
            |(request_id, session_id, cwd, (model, variant, effort))| {
                Command::Start(StartCommand {
                    request_id,
                    session_id,
                    cwd,
                    model,
                    model_backend_variant: variant,
                    reasoning_effort: effort,
                })
            }
        ),
        (
            request_id(),
            label(),
            label(),
            state(),
            option::of(prop_oneof![
                Just(ResumeMode::Reattach),
                Just(ResumeMode::Rebuild)
            ]),
            hints()
        )
            .prop_map(
                |(request_id, session_id, cwd, state, resume_mode, (model, variant, effort))| {
                    Command::Resume(ResumeCommand {
                        request_id,
                        session_id,
                        cwd,
                        state,
                        resume_mode,
                        model,
                        model_backend_variant: variant,
                        reasoning_effort: effort,
                    })
                }
            ),
        (
            request_id(),
            free_id(),
            text(),
            option::of(trusted_caller())
        )
            .prop_map(|(request_id, turn_id, content, trusted_caller)| {
                Command::Turn(TurnCommand {
                    request_id,
                    turn_id,
                    content,
                    trusted_caller,
                })
            }),
        (request_id(), 0..4u8).prop_map(|(request_id, which)| {
            let c = RequestCommand { request_id };
            match which {
                0 => Command::Cancel(c),
                1 => Command::Detach(c),
                2 => Command::Reattach(c),
                _ => Command::Status(c),
            }
        }),
        (request_id(), generation(), ".{1,40}").prop_map(|(request_id, generation, data)| {
            Command::TerminalInput(TerminalInputCommand {
                request_id,
                generation,
                data,
            })
        }),
        (request_id(), generation(), 1u64..=1000, 1u64..=1000).prop_map(
            |(request_id, generation, cols, rows)| {
                Command::TerminalResize(TerminalResizeCommand {
                    request_id,
                    generation,
                    cols,
                    rows,
                })
            }
        ),
        (request_id(), id(), id(), generation(), outbound_result()).prop_map(
            |(request_id, operation_id, turn_id, generation, result)| {
                Command::OutboundMessageResult(OutboundMessageResultCommand {
                    request_id,
                    operation_id,
                    turn_id,
                    generation,
                    result,
                })
            }
        ),
        (request_id(), id(), id(), generation(), tool_result()).prop_map(
            |(request_id, operation_id, turn_id, generation, result)| {
                Command::SessionToolResult(SessionToolResultCommand {
                    request_id,
                    operation_id,
                    turn_id,
                    generation,
                    result,
                })
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_event_round_trips(event in event()) {
        event.validate().map_err(|e| TestCaseError::fail(format!("generated invalid event: {e}")))?;
        let line = encode_event(&event);
        prop_assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        prop_assert_eq!(line.last(), Some(&b'\n'));
        let decoded = decode_event(&line).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&decoded, &event);
        prop_assert_eq!(encode_event(&decoded), line);
    }

    #[test]
    fn every_command_round_trips(command in command()) {
        command.validate().map_err(|e| TestCaseError::fail(format!("generated invalid command: {e}")))?;
        let line = encode_command(&command);
        prop_assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let decoded = decode_command(&line).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&decoded, &command);
        prop_assert_eq!(encode_command(&decoded), line);
    }

    #[test]
    fn state_round_trips_and_never_writes_null(state in state()) {
        state.validate().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let value = serde_json::to_value(&state).unwrap();
        for key in ["remoteSessionId", "agentThreadId", "providerState"] {
            prop_assert_ne!(value.get(key), Some(&Value::Null));
        }
        let back: State = serde_json::from_value(value).unwrap();
        prop_assert_eq!(back, state);
    }

    #[test]
    fn usage_always_writes_context_and_tokens(usage in usage(3)) {
        usage.validate_at("usage").map_err(|e| TestCaseError::fail(e.to_string()))?;
        let value = serde_json::to_value(&usage).unwrap();
        prop_assert!(value["snapshot"].get("context").is_some());
        prop_assert!(value["snapshot"].get("tokens").is_some());
        let back: Usage = serde_json::from_value(value).unwrap();
        prop_assert_eq!(back, usage);
    }
}
