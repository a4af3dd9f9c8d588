//! The RESP connection's tests: whole and partial replies, hostile peers (bogus lengths, deep
//! nesting, endless lines) refused without allocating, discarded replies counted, encoding.

use super::*;

fn parse(bytes: &[u8]) -> io::Result<Option<(Reply, usize)>> {
    parse_reply(bytes, ReplyLimits::PROBE)
}

#[test]
fn parses_whole_replies_and_waits_for_partial_ones() {
    assert_eq!(
        parse(b"+PONG\r\n+PO").unwrap(),
        Some((Reply::Status("PONG".into()), 7))
    );
    assert_eq!(parse(b"+PO").unwrap(), None);
    assert_eq!(parse(b"$5\r\nhel").unwrap(), None);
    assert_eq!(
        parse(b"$5\r\nhello\r\n").unwrap(),
        Some((Reply::Bulk(Some(b"hello".to_vec())), 11))
    );
    assert_eq!(parse(b"$-1\r\n").unwrap(), Some((Reply::Bulk(None), 5)));
    assert_eq!(
        parse(b"-ERR x\r\n").unwrap(),
        Some((Reply::Error("ERR x".into()), 8))
    );
    assert_eq!(
        parse(b"*2\r\n:1\r\n$1\r\na\r\n").unwrap(),
        Some((
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Bulk(Some(b"a".to_vec()))
            ])),
            15
        ))
    );
    assert_eq!(parse(b"*2\r\n:1\r\n").unwrap(), None);
}

#[test]
fn hostile_replies_are_errors_not_allocations() {
    let err = parse(b"$9223372036854775807\r\n").unwrap_err();
    assert!(
        err.to_string().contains("9223372036854775807 bytes"),
        "{err}"
    );
    assert!(parse(b"*9223372036854775807\r\n").is_err());
    let err = parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").unwrap_err();
    assert!(err.to_string().contains("nested more than 2 deep"), "{err}");
    let err = parse(&vec![b'+'; 70 * 1024]).unwrap_err();
    assert!(err.to_string().contains("without a line end"), "{err}");
    assert!(parse(b"$2\r\nabcd").is_err());
    let err = parse(b"?garbage\r\n").unwrap_err();
    assert!(err.to_string().contains("'?garbage'"), "{err}");
    // A probe's reply is small: a bulk past 64 KiB is refused before its bytes come.
    assert!(parse(b"$65537\r\n").is_err());
    assert_eq!(parse(b"$65536\r\n").unwrap(), None);
}

/// Fed a byte at a time, the resuming parser finds the same replies as a whole buffer does,
/// and the search for a line's end goes on where it stopped.
#[test]
fn a_reply_fed_a_byte_at_a_time_parses_the_same_and_is_not_rescanned() {
    let stream: &[u8] = b"+PONG\r\n$5\r\nhel\rl\r\n*2\r\n:1\r\n$0\r\n\r\n-ERR x\r\n$-1\r\n";
    let mut whole = Vec::new();
    let mut at = 0;
    while let Some((reply, n)) = parse(&stream[at..]).unwrap() {
        whole.push(reply);
        at += n;
    }
    assert_eq!(at, stream.len());
    assert_eq!(whole.len(), 5);

    let mut pending = Vec::new();
    let mut resume = ParseResume::default();
    let mut fed = Vec::new();
    for &byte in stream {
        pending.push(byte);
        while let Some((reply, n)) =
            parse_reply_resuming(&pending, ReplyLimits::PROBE, &mut resume).unwrap()
        {
            fed.push(reply);
            pending.drain(..n);
        }
    }
    assert_eq!(fed, whole);
    assert!(pending.is_empty());

    // A long line without its end: each call searches only the bytes that came since.
    let mut resume = ParseResume::default();
    let mut line = b"+".to_vec();
    line.extend(std::iter::repeat_n(b'a', 1000));
    assert_eq!(
        parse_reply_resuming(&line, ReplyLimits::PROBE, &mut resume).unwrap(),
        None
    );
    assert_eq!(resume.searched_to, 1000);
    assert_eq!(resume.need, 1002);
    line.push(b'\r');
    assert_eq!(
        parse_reply_resuming(&line, ReplyLimits::PROBE, &mut resume).unwrap(),
        None
    );
    assert_eq!(resume.searched_to, 1001);
    line.push(b'\n');
    let (reply, n) = parse_reply_resuming(&line, ReplyLimits::PROBE, &mut resume)
        .unwrap()
        .unwrap();
    assert_eq!(reply, Reply::Status("a".repeat(1000)));
    assert_eq!(n, line.len());
    assert_eq!(resume, ParseResume::default());
    // A bulk whose bytes have not all come is not parsed again until they have.
    let mut resume = ParseResume::default();
    assert_eq!(
        parse_reply_resuming(b"$10\r\nabc", ReplyLimits::PROBE, &mut resume).unwrap(),
        None
    );
    assert_eq!(resume.need, 17);
}

/// A peer that sends `bytes` to whoever connects, then hangs up: the hostile server a real
/// one never is, for the reader's bounds.
fn hostile_peer(bytes: Vec<u8>) -> RawConn {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        let _ = sock.write_all(&bytes);
    });
    RawConn::connect(&ConnInfo::loopback(port)).unwrap()
}

#[test]
fn a_discarded_reply_is_counted_not_kept() {
    let reply = b"*3\r\n$3\r\nabc\r\n*2\r\n:5\r\n$0\r\n\r\n*0\r\n+OK\r\n".to_vec();
    let mut conn = hostile_peer(reply.clone());
    let seen = conn.discard_reply(1 << 20).unwrap();
    assert_eq!(
        seen.elements, 3,
        "abc, 5, the empty string; the empty array holds none"
    );
    assert_eq!(seen.bytes, (reply.len() - b"+OK\r\n".len()) as u64);
    assert_eq!(seen.error, None);
    // The next reply is read from where the discarded one ended.
    assert_eq!(conn.read_reply().unwrap(), Reply::Status("OK".into()));
    let mut conn = hostile_peer(b"-WRONGTYPE no\r\n".to_vec());
    assert_eq!(
        conn.discard_reply(1 << 20).unwrap().error.as_deref(),
        Some("WRONGTYPE no")
    );
    // An array longer than a control reply may be is fine when nothing is kept; the bytes
    // are bounded.
    let mut many = format!("*{}\r\n", 3_000_000).into_bytes();
    for _ in 0..3_000_000 {
        many.extend_from_slice(b":1\r\n");
    }
    let mut conn = hostile_peer(many.clone());
    assert_eq!(conn.discard_reply(1 << 30).unwrap().elements, 3_000_000);
    let mut conn = hostile_peer(many);
    let err = conn.discard_reply(1 << 20).unwrap_err();
    assert!(err.to_string().contains("larger than 1 MiB"), "{err}");
    // A bulk without its CRLF, and nesting past the limit.
    let mut conn = hostile_peer(b"$3\r\nabcXY".to_vec());
    assert!(
        conn.discard_reply(1 << 20)
            .unwrap_err()
            .to_string()
            .contains("CRLF")
    );
    let mut conn = hostile_peer(b"*1\r\n".repeat(20));
    assert!(
        conn.discard_reply(1 << 20)
            .unwrap_err()
            .to_string()
            .contains("nested")
    );
}

#[test]
fn a_bogus_bulk_length_is_an_error_not_an_allocation() {
    // Within the limit, the memory grows only with what arrives: a closed socket ends it.
    let mut conn = hostile_peer(b"$8000000\r\nabc".to_vec());
    let err = conn.read_reply().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    // Past it, refused before a byte is read or allocated, and the connection is done.
    for huge in ["$9223372036854775807\r\n", "$8000000000\r\n"] {
        let mut conn = hostile_peer(huge.as_bytes().to_vec());
        let err = conn.read_reply().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(err.to_string().contains("bulk string of"), "{err}");
        assert!(err.to_string().contains("(16 MiB)"), "{err}");
        assert!(conn.broken().is_some());
    }
    // A connection that reads large values back takes one of that size, and no larger.
    let limits = ReplyLimits::for_values_up_to(600 << 20);
    assert_eq!(limits.max_bulk, (600 << 20) + REPLY_MARGIN_BYTES);
    assert_eq!(ReplyLimits::for_values_up_to(10), ReplyLimits::CONTROL);
    let mut conn = hostile_peer(b"$700000000\r\n".to_vec());
    conn.set_limits(limits);
    assert!(
        conn.read_reply()
            .unwrap_err()
            .to_string()
            .contains("700000000")
    );
}

#[test]
fn a_reply_of_many_small_parts_is_bounded_as_a_whole() {
    let mut bytes = b"*1000000\r\n".to_vec();
    for _ in 0..1_000_000 {
        bytes.extend_from_slice(b"$16\r\n0123456789abcdef\r\n");
    }
    let mut conn = hostile_peer(bytes);
    let err = conn.read_reply().unwrap_err();
    assert!(
        err.to_string().contains("reply larger than 17 MiB"),
        "{err}"
    );
}

#[test]
fn deep_nesting_and_endless_lines_are_refused() {
    let mut nested = b"*1\r\n".repeat(40);
    nested.extend_from_slice(b":1\r\n");
    let err = hostile_peer(nested).read_reply().unwrap_err();
    assert!(err.to_string().contains("nested more than 8 deep"), "{err}");
    let err = hostile_peer(vec![b'a'; 4 * ReplyLimits::CONTROL.max_line])
        .read_reply()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("more than 64 KiB without a line end (CRLF), starting 'aaaa"),
        "{err}"
    );
    let err = hostile_peer(b"\x16\x03\x01garbage\r\n".to_vec())
        .read_reply()
        .unwrap_err();
    assert!(err.to_string().contains(r"'\x16\x03\x01garbage'"), "{err}");
    // Within the bounds, a reply split anywhere still reads whole.
    let mut conn = hostile_peer(b"*2\r\n$3\r\nabc\r\n+OK\r\n".to_vec());
    assert_eq!(
        conn.read_reply().unwrap(),
        Reply::Array(Some(vec![
            Reply::Bulk(Some(b"abc".to_vec())),
            Reply::Status("OK".into())
        ]))
    );
}

#[test]
fn encodes_commands() {
    assert_eq!(encode_command(&[b"PING"]), b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(
        encode_command(&[b"GET", b"k"]),
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    );
}

#[test]
fn encodes_lengths_of_every_width_and_appends() {
    let ten = [b'x'; 10];
    let big = vec![b'y'; 12_345];
    let mut out = b"prefix".to_vec();
    encode_command_into(&mut out, &[b"", &ten, &big]);
    let mut expected = b"prefix*3\r\n$0\r\n\r\n$10\r\n".to_vec();
    expected.extend_from_slice(&ten);
    expected.extend_from_slice(b"\r\n$12345\r\n");
    expected.extend_from_slice(&big);
    expected.extend_from_slice(b"\r\n");
    assert_eq!(out, expected);
}
