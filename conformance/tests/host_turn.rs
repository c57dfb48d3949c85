//! The `botmux-host-turn` binary: one turn driven as the host drives it, against real `sh`
//! providers. It passes only when every answer is right, and otherwise names the first step
//! whose answer was wrong (what scripts/demo.sh reports).

use std::process::{Command, Output};

const HOST_TURN: &str = env!("CARGO_BIN_EXE_botmux-host-turn");

/// An `sh` provider: every answer as the host wants it, except that `turn_reply` answers the
/// turn (`$T` is the turn's requestId line prefix).
fn provider(turn_reply: &str) -> String {
    format!(
        r#"P='"protocol":"botmux.remote-runner","version":1'
S='"state":{{"version":1,"provider":"sh","generation":1,"remoteSessionId":"sh-1"}}'
while IFS= read -r line; do
  case $line in
    *'"type":"hello"'*) printf '%s\n' "{{$P,\"type\":\"hello\",\"requestId\":\"hello:1\",\"provider\":\"sh\",\"capabilities\":[\"start\",\"resume\",\"turn\",\"cancel\",\"detach\",\"reattach\",\"status\"]}}" ;;
    *'"type":"start"'*) printf '%s\n' "{{$P,\"type\":\"ready\",\"requestId\":\"start:1\",$S}}" ;;
    *'"type":"turn"'*) {turn_reply} ;;
    *'"type":"cancel"'*) id=$(printf '%s' "$line" | sed 's/.*"requestId":"\([^"]*\)".*/\1/')
      printf '%s\n' "{{$P,\"type\":\"status\",\"requestId\":\"$id\",\"status\":\"closed\"}}" ;;
  esac
done"#
    )
}

const GOOD_TURN: &str = r#"printf '%s\n' "{$P,\"type\":\"status\",\"requestId\":\"turn:turn-1\",\"status\":\"busy\"}" "{$P,\"type\":\"progress\",\"turnId\":\"turn-1\",\"content\":\"hi from sh\"}" "{$P,\"type\":\"final\",\"turnId\":\"turn-1\",\"content\":\"hi from sh\"}""#;

fn host_turn(expect: &str, script: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(HOST_TURN)
        .args(["--cwd", &dir.path().display().to_string()])
        .args(["--content", "echo hi", "--expect", expect, "--timeout", "5"])
        .args(["--", "sh", "-c", script])
        .output()
        .expect("botmux-host-turn runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_provider_that_answers_every_step_passes() {
    let out = host_turn("hi from sh", &provider(GOOD_TURN));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for line in [
        "<- hello: provider sh, 7 capabilities",
        "<- ready: remote session sh-1, generation 1",
        "<- status busy",
        "     hi from sh",
        "<- status closed; SIGTERM: the provider exited",
    ] {
        assert!(stdout.contains(line), "{line:?} in:\n{stdout}");
    }
}

#[test]
fn a_refused_turn_fails_the_turn_step() {
    let refuse = r#"printf '%s\n' "{$P,\"type\":\"failure\",\"requestId\":\"turn:turn-1\",\"turnId\":\"turn-1\",\"code\":\"not_ready\",\"message\":\"no session yet\",\"status\":\"failed\",\"retryable\":true}""#;
    let out = host_turn("hi from sh", &provider(refuse));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("step turn failed") && stderr.contains("not_ready"),
        "{stderr}"
    );
}

#[test]
fn a_final_without_the_expected_text_fails_the_final_step() {
    let out = host_turn("something else", &provider(GOOD_TURN));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("step final failed") && stderr.contains("something else"),
        "{stderr}"
    );
}

#[test]
fn an_event_type_outside_v1_fails_the_step_that_reads_it() {
    let odd = r#"printf '%s\n' "{$P,\"type\":\"accepted\",\"requestId\":\"turn:turn-1\"}""#;
    let out = host_turn("hi from sh", &provider(odd));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("step turn failed") && stderr.contains("invalid line"),
        "{stderr}"
    );
}
