//! The edge rules that once drifted apart between the proxy, the sidecar, the tower layer and
//! the tower balancer, pinned here so that they cannot drift again: which headers are
//! hop-by-hop (in both directions), what a response's status and `grpc-status` say about the
//! replica, and that a tracked body reports its end exactly once however it ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use prequal_core::Outcome;
use prequal_http::headers::{Direction, HOP_BY_HOP, strip_hop_by_hop};
use prequal_http::{OnEnd, TrackedBody, grpc_outcome, head_outcome, track};

// --- Hop-by-hop headers --------------------------------------------------------------------

/// Every field a hop removes whether or not `Connection` lists it, in both directions.
const ALWAYS_HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
];

/// Fields that describe the message and pass every hop, `Trailer` above all.
const END_TO_END: [&str; 6] = [
    "trailer",
    "content-type",
    "content-length",
    "grpc-timeout",
    "via",
    "x-request-id",
];

fn headers(pairs: &[(&str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_static(value),
        );
    }
    map
}

fn names(map: &HeaderMap) -> Vec<&str> {
    let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    names
}

#[test]
fn the_hop_by_hop_set_is_rfc_9110_plus_the_proxy_auth_fields() {
    let hop_by_hop = HOP_BY_HOP;
    let mut set: Vec<&str> = hop_by_hop.iter().map(HeaderName::as_str).collect();
    set.sort_unstable();
    let mut expected = ALWAYS_HOP_BY_HOP.to_vec();
    expected.sort_unstable();
    assert_eq!(set, expected);
    assert!(!set.contains(&"trailer"), "Trailer describes the message");
}

#[test]
fn each_hop_by_hop_field_goes_alone_in_both_directions() {
    for direction in [Direction::Request, Direction::Response] {
        for name in ALWAYS_HOP_BY_HOP {
            // `TE: trailers` is the request exception, pinned below; any other TE goes.
            let mut map = headers(&[(name, "x"), ("accept", "*/*")]);
            strip_hop_by_hop(&mut map, direction);
            assert_eq!(names(&map), ["accept"], "{name} kept on a {direction:?}");
        }
    }
}

#[test]
fn end_to_end_fields_pass_in_both_directions() {
    for direction in [Direction::Request, Direction::Response] {
        let pairs: Vec<(&str, &'static str)> = END_TO_END.iter().map(|n| (*n, "v")).collect();
        // With a hop-by-hop field present too, so the map is really rewritten.
        let mut map = headers(&pairs);
        map.insert(header::CONNECTION, HeaderValue::from_static("close"));
        strip_hop_by_hop(&mut map, direction);
        let mut expected = END_TO_END.to_vec();
        expected.sort_unstable();
        assert_eq!(names(&map), expected, "{direction:?}");
    }
}

#[test]
fn fields_named_in_connection_go_in_both_directions() {
    for direction in [Direction::Request, Direction::Response] {
        let mut map = headers(&[
            ("connection", "X-Private, close"),
            ("connection", " x-other "),
            ("x-private", "1"),
            ("x-other", "2"),
            ("x-public", "3"),
        ]);
        strip_hop_by_hop(&mut map, direction);
        assert_eq!(names(&map), ["x-public"], "{direction:?}");
    }
}

#[test]
fn te_trailers_is_kept_on_requests_only() {
    let mut request = headers(&[("te", "trailers"), ("connection", "te")]);
    strip_hop_by_hop(&mut request, Direction::Request);
    assert_eq!(request.get(header::TE).unwrap(), "trailers");
    assert_eq!(names(&request), ["te"]);

    let mut mixed = headers(&[("te", "gzip"), ("te", "Trailers")]);
    strip_hop_by_hop(&mut mixed, Direction::Request);
    assert_eq!(mixed.get_all(header::TE).iter().count(), 1);
    assert_eq!(mixed.get(header::TE).unwrap(), "trailers");

    let mut gzip = headers(&[("te", "gzip")]);
    strip_hop_by_hop(&mut gzip, Direction::Request);
    assert!(gzip.is_empty());

    let mut response = headers(&[("te", "trailers")]);
    strip_hop_by_hop(&mut response, Direction::Response);
    assert!(response.is_empty());
}

#[test]
fn a_clean_message_is_left_alone() {
    let mut map = headers(&[("accept", "*/*"), ("trailer", "grpc-status")]);
    let before = map.clone();
    strip_hop_by_hop(&mut map, Direction::Response);
    assert_eq!(map, before);
}

// --- gRPC status and response head ---------------------------------------------------------

fn grpc(value: &[u8]) -> Outcome {
    let mut map = HeaderMap::new();
    map.insert("grpc-status", HeaderValue::from_bytes(value).unwrap());
    grpc_outcome(&map)
}

#[test]
fn grpc_status_classification() {
    assert_eq!(grpc_outcome(&HeaderMap::new()), Outcome::Success, "missing");
    assert_eq!(grpc(b"0"), Outcome::Success, "OK");
    assert_eq!(grpc(b"4"), Outcome::Timeout, "DEADLINE_EXCEEDED");
    for code in [2, 8, 13, 14, 15] {
        let text = code.to_string();
        assert_eq!(grpc(text.as_bytes()), Outcome::Error, "{code}");
    }
    // The caller's faults say nothing against the replica.
    for code in [1, 3, 5, 6, 7, 9, 10, 11, 12, 16] {
        let text = code.to_string();
        assert_eq!(grpc(text.as_bytes()), Outcome::Success, "{code}");
    }
    // Garbled: not a code at all, so nothing against the replica either.
    for garbled in [
        &b""[..],
        b"abc",
        b"04",
        b" 4",
        b"4 ",
        b"14x",
        b"99",
        b"-4",
        b"\xff",
    ] {
        assert_eq!(grpc(garbled), Outcome::Success, "{garbled:?}");
    }
}

#[test]
fn the_head_judges_5xx_first_then_grpc_status() {
    let grpc_map = |code: &'static str| headers(&[("grpc-status", code)]);
    let cases = [
        (200, HeaderMap::new(), Outcome::Success),
        (404, HeaderMap::new(), Outcome::Success),
        (500, HeaderMap::new(), Outcome::Error),
        (503, grpc_map("0"), Outcome::Error),
        (504, grpc_map("4"), Outcome::Error),
        (200, grpc_map("14"), Outcome::Error),
        (200, grpc_map("4"), Outcome::Timeout),
        (400, grpc_map("4"), Outcome::Timeout),
        (200, grpc_map("5"), Outcome::Success),
    ];
    for (status, map, expected) in cases {
        let status = StatusCode::from_u16(status).unwrap();
        assert_eq!(head_outcome(status, &map), expected, "{status} {map:?}");
    }
}

// --- The tracked body -----------------------------------------------------------------------

/// What a tracked body told its driver.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Heard {
    Ended(Outcome),
    Abandoned,
}

/// An [`OnEnd`] that writes down what it hears, abandonment (a drop without an end) included.
struct Recorder {
    heard: Arc<Mutex<Vec<Heard>>>,
    ended: bool,
}

impl OnEnd for Recorder {
    fn on_end(mut self, outcome: Outcome) {
        self.ended = true;
        self.heard.lock().unwrap().push(Heard::Ended(outcome));
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if !self.ended {
            self.heard.lock().unwrap().push(Heard::Abandoned);
        }
    }
}

fn recorder() -> (Recorder, Arc<Mutex<Vec<Heard>>>) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        heard: Arc::clone(&heard),
        ended: false,
    };
    (recorder, heard)
}

/// A body that yields the frames given, then (if asked) an error, then `None`. It reports
/// its end and its size only as `end_stream` and `declared` make it.
struct Frames {
    frames: VecDeque<Frame<Bytes>>,
    error: bool,
    /// Whether `is_end_stream` is true once the frames are out.
    end_stream: bool,
    /// A declared length, so that the size hint reaches an exact 0.
    declared: Option<u64>,
}

impl Frames {
    fn new(frames: Vec<Frame<Bytes>>) -> Self {
        Frames {
            frames: frames.into(),
            error: false,
            end_stream: false,
            declared: None,
        }
    }

    fn data(text: &'static str) -> Frame<Bytes> {
        Frame::data(Bytes::from_static(text.as_bytes()))
    }

    fn trailers(code: &'static str) -> Frame<Bytes> {
        Frame::trailers(headers(&[("grpc-status", code)]))
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = &'static str;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
        if let Some(frame) = self.frames.pop_front() {
            if let (Some(declared), Some(data)) = (self.declared, frame.data_ref()) {
                self.declared = Some(declared - data.len() as u64);
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        if std::mem::take(&mut self.error) {
            return Poll::Ready(Some(Err("reset")));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.end_stream && self.frames.is_empty() && !self.error
    }

    fn size_hint(&self) -> SizeHint {
        self.declared
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// Polls `body` once, without a runtime: every test body is ready at once.
fn poll<B: Body + Unpin>(body: &mut B) -> Option<Result<Frame<B::Data>, B::Error>> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Ready(frame) => frame,
        Poll::Pending => panic!("test bodies are always ready"),
    }
}

/// Polls `body` to its `None` (and once more), returning how many frames it gave.
fn drain<B: Body + Unpin>(body: &mut B) -> usize {
    let mut frames = 0;
    while poll(body).is_some() {
        frames += 1;
    }
    assert!(poll(body).is_none());
    frames
}

fn heard(log: &Arc<Mutex<Vec<Heard>>>) -> Vec<Heard> {
    log.lock().unwrap().clone()
}

#[test]
fn a_body_read_to_none_reports_once() {
    let (on_end, log) = recorder();
    let inner = Frames::new(vec![Frames::data("a"), Frames::data("b")]);
    let mut body = TrackedBody::new(inner, Outcome::Success, on_end);
    assert!(poll(&mut body).is_some());
    assert!(poll(&mut body).is_some());
    assert!(heard(&log).is_empty(), "not before its end");
    assert_eq!(drain(&mut body), 0);
    drop(body);
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Success)]);
}

#[test]
fn trailers_end_the_body_and_carry_its_grpc_status() {
    for (code, outcome) in [
        ("0", Outcome::Success),
        ("4", Outcome::Timeout),
        ("14", Outcome::Error),
        ("5", Outcome::Success),
    ] {
        let (on_end, log) = recorder();
        let inner = Frames::new(vec![Frames::data("a"), Frames::trailers(code)]);
        let mut body = TrackedBody::new(inner, Outcome::Success, on_end);
        assert!(poll(&mut body).is_some());
        assert!(heard(&log).is_empty());
        assert!(poll(&mut body).unwrap().unwrap().is_trailers());
        // Reported at the trailers: hyper may never poll for the `None` after them.
        assert_eq!(heard(&log), [Heard::Ended(outcome)], "{code}");
        assert_eq!(body.outcome(), outcome);
        drain(&mut body);
        drop(body);
        assert_eq!(heard(&log), [Heard::Ended(outcome)], "{code}: once");
    }
}

#[test]
fn trailers_do_not_clear_a_failure_seen_in_the_head() {
    let (on_end, log) = recorder();
    let inner = Frames::new(vec![Frames::trailers("0")]);
    let mut body = TrackedBody::new(inner, Outcome::Error, on_end);
    drain(&mut body);
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Error)]);
}

#[test]
fn a_body_that_says_it_has_ended_reports_without_a_none() {
    let (on_end, log) = recorder();
    let mut inner = Frames::new(vec![Frames::data("a")]);
    inner.end_stream = true;
    let mut body = TrackedBody::new(inner, Outcome::Success, on_end);
    assert!(poll(&mut body).is_some());
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Success)]);
    drop(body);
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Success)]);
}

#[test]
fn a_body_that_has_sent_its_declared_length_reports_without_a_none() {
    let (on_end, log) = recorder();
    let mut inner = Frames::new(vec![Frames::data("ab"), Frames::data("cd")]);
    inner.declared = Some(4);
    let mut body = TrackedBody::new(inner, Outcome::Success, on_end);
    assert!(poll(&mut body).is_some());
    assert!(heard(&log).is_empty(), "two bytes still to come");
    assert!(poll(&mut body).is_some());
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Success)]);
    drop(body);
    assert_eq!(heard(&log).len(), 1);
}

#[test]
fn a_body_already_at_its_end_reports_when_wrapped() {
    let (on_end, log) = recorder();
    let empty = Full::new(Bytes::new());
    assert!(empty.is_end_stream());
    let body = TrackedBody::new(empty, Outcome::Timeout, on_end);
    assert!(body.has_ended());
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Timeout)]);
    drop(body);
    assert_eq!(heard(&log).len(), 1);
}

#[test]
fn a_failing_body_reports_an_error_once() {
    let (on_end, log) = recorder();
    let mut inner = Frames::new(vec![Frames::data("a")]);
    inner.error = true;
    let mut body = TrackedBody::new(inner, Outcome::Success, on_end);
    assert!(poll(&mut body).unwrap().is_ok());
    assert!(poll(&mut body).unwrap().is_err());
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Error)]);
    assert!(poll(&mut body).is_none());
    drop(body);
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Error)]);
}

#[test]
fn a_body_dropped_before_its_end_is_abandoned_once() {
    let (on_end, log) = recorder();
    let inner = Frames::new(vec![Frames::data("a"), Frames::data("b")]);
    let mut body = TrackedBody::new(inner, Outcome::Success, on_end);
    assert!(poll(&mut body).is_some());
    drop(body);
    assert_eq!(heard(&log), [Heard::Abandoned]);

    // Taking the inner body out abandons it too.
    let (on_end, log) = recorder();
    let inner = Frames::new(vec![Frames::data("a")]);
    let body = TrackedBody::new(inner, Outcome::Success, on_end);
    let mut inner = body.into_inner();
    assert_eq!(heard(&log), [Heard::Abandoned]);
    drain(&mut inner);
    assert_eq!(heard(&log), [Heard::Abandoned]);
}

#[test]
fn track_judges_the_head() {
    let cases = [
        (StatusCode::OK, None, Outcome::Success),
        (StatusCode::BAD_GATEWAY, None, Outcome::Error),
        (StatusCode::OK, Some("14"), Outcome::Error),
        (StatusCode::OK, Some("4"), Outcome::Timeout),
    ];
    for (status, grpc_status, outcome) in cases {
        let (on_end, log) = recorder();
        let mut response = Response::new(Frames::new(vec![Frames::data("a")]));
        *response.status_mut() = status;
        if let Some(code) = grpc_status {
            let value = HeaderValue::from_static(code);
            response.headers_mut().insert("grpc-status", value);
        }
        let mut body = track(response, on_end).into_body();
        assert_eq!(body.outcome(), outcome);
        drain(&mut body);
        assert_eq!(
            heard(&log),
            [Heard::Ended(outcome)],
            "{status} {grpc_status:?}"
        );
    }
    // A body with no frames at all: reported as soon as it is wrapped.
    let (on_end, log) = recorder();
    let response = Response::new(Full::new(Bytes::new()));
    let _response = track(response, on_end);
    assert_eq!(heard(&log), [Heard::Ended(Outcome::Success)]);
}
