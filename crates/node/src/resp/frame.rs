//! The request frames RESP clients send, read without trusting them: a flat array of bulk
//! strings (`*<n>\r\n` then `n` times `$<len>\r\n<len bytes>\r\n`), nothing else.
//!
//! Invariants:
//! - nothing is allocated or recursed into: the frame is walked once, left to right, and its
//!   arguments are returned as ranges of the caller's buffer, at most [`MAX_ARGS`] of them;
//! - the argument count and every bulk length are checked against the limits as soon as their
//!   header is read, before their bytes are waited for: a header announcing more than the
//!   request may hold is refused at once, whatever follows;
//! - nesting (an array inside the array), other types, inline commands, negative or absurd
//!   lengths and missing `\r\n` are protocol errors: the stream cannot be resynchronised, so
//!   the caller answers the error and closes the connection;
//! - an incomplete frame is reported as such and nothing is consumed.

/// The most arguments one request may have (the command name included): `HELLO 3 AUTH user
/// pass SETNAME name` has 7, `IDMINT.GIVEBACK ns lease start end step` 6.
pub const MAX_ARGS: usize = 16;

/// The most digits a length may have: enough for any length the limits allow.
const MAX_DIGITS: usize = 10;

/// How large a request may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the whole frame.
    pub request: usize,
}

/// The arguments of a complete request, as ranges of the buffer parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    ranges: [(usize, usize); MAX_ARGS],
    len: usize,
}

impl Args {
    /// The arguments as slices of `buf` (the buffer [`parse`] read).
    pub fn slices<'a>(&self, buf: &'a [u8]) -> ([&'a [u8]; MAX_ARGS], usize) {
        let mut out: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
        for (slot, &(start, end)) in out.iter_mut().zip(&self.ranges[..self.len]) {
            *slot = buf.get(start..end).unwrap_or_default();
        }
        (out, self.len)
    }
}

/// What the start of a buffer holds.
// The request variant is 264 bytes, the others small: returned once per request and taken
// apart at once, and boxing it would allocate on every request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Not a whole request yet: read more (nothing was consumed).
    Incomplete,
    /// A request: its arguments, and how many bytes it took.
    Request {
        /// The arguments.
        args: Args,
        /// Bytes of the buffer it took.
        used: usize,
    },
    /// Not a request a client may send; why (the connection must close).
    Refused(String),
}

/// Reads the request at the start of `buf` under `limits`.
pub fn parse(buf: &[u8], limits: Limits) -> Frame {
    let mut at = 0;
    let header = match line(buf, &mut at, b'*') {
        Line::Number(n) => n,
        Line::Incomplete => return Frame::Incomplete,
        Line::Refused(why) => {
            let why = if buf.first().is_some_and(u8::is_ascii_alphabetic) {
                "inline commands are not supported; send RESP arrays".to_owned()
            } else {
                why
            };
            return Frame::Refused(why);
        }
    };
    if header == 0 || header > MAX_ARGS {
        return Frame::Refused(format!(
            "a request is an array of 1 to {MAX_ARGS} bulk strings; this one announces {header}"
        ));
    }
    let mut args = Args {
        ranges: [(0, 0); MAX_ARGS],
        len: header,
    };
    for slot in args.ranges.iter_mut().take(header) {
        let len = match line(buf, &mut at, b'$') {
            Line::Number(n) => n,
            Line::Incomplete => return Frame::Incomplete,
            Line::Refused(why) => return Frame::Refused(why),
        };
        // Announced: refused before its bytes are waited for.
        let end = match at.checked_add(len).and_then(|e| e.checked_add(2)) {
            Some(end) if end <= limits.request => end,
            _ => {
                return Frame::Refused(format!("a request is larger than {} bytes", limits.request))
            }
        };
        if buf.len() < end {
            return Frame::Incomplete;
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Frame::Refused("a bulk string does not end with CRLF".into());
        }
        *slot = (at, at + len);
        at = end;
    }
    Frame::Request { args, used: at }
}

/// A header line's outcome.
enum Line {
    Number(usize),
    Incomplete,
    Refused(String),
}

/// Reads `<kind><digits>\r\n` at `*at`, moving `*at` past it.
fn line(buf: &[u8], at: &mut usize, kind: u8) -> Line {
    let Some(&first) = buf.get(*at) else {
        return Line::Incomplete;
    };
    if first != kind {
        return Line::Refused(match (kind, first) {
            (b'$', b'*') => "nested arrays are not supported: a request is a flat array".into(),
            (b'$', _) => "a request's elements must be bulk strings".into(),
            _ => "a request must be an array of bulk strings".into(),
        });
    }
    let mut n: usize = 0;
    let mut digits = 0;
    let mut i = *at + 1;
    loop {
        let Some(&b) = buf.get(i) else {
            return Line::Incomplete;
        };
        match b {
            b'0'..=b'9' if digits < MAX_DIGITS => {
                n = n * 10 + usize::from(b - b'0');
                digits += 1;
            }
            b'\r' if digits > 0 => break,
            _ => return Line::Refused("a length is not a small decimal number".into()),
        }
        i += 1;
    }
    match buf.get(i + 1) {
        None => Line::Incomplete,
        Some(b'\n') => {
            *at = i + 2;
            Line::Number(n)
        }
        Some(_) => Line::Refused("a length does not end with CRLF".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const LIMITS: Limits = Limits { request: 1024 };

    fn args(buf: &[u8]) -> Vec<Vec<u8>> {
        match parse(buf, LIMITS) {
            Frame::Request { args, used } => {
                assert_eq!(used, buf.len());
                let (slices, n) = args.slices(buf);
                slices[..n].iter().map(|s| s.to_vec()).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flat_arrays_of_bulk_strings_are_read_in_place() {
        assert_eq!(
            args(b"*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n"),
            [b"INCR".to_vec(), b"orders".to_vec()]
        );
        assert_eq!(args(b"*1\r\n$0\r\n\r\n"), [Vec::<u8>::new()]);
    }

    #[test]
    fn every_prefix_of_a_request_is_incomplete() {
        let whole = b"*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n";
        for end in 0..whole.len() {
            assert_eq!(parse(&whole[..end], LIMITS), Frame::Incomplete, "{end}");
        }
    }

    #[test]
    fn nesting_and_other_shapes_are_refused_without_recursion() {
        // 8000 nested arrays: refused at the second header, whatever follows.
        let nested = b"*1\r\n".repeat(8000);
        assert!(matches!(parse(&nested, LIMITS), Frame::Refused(why) if why.contains("nested")));
        for bad in [
            &b"INCR orders\r\n"[..],
            b"*0\r\n",
            b"*17\r\n",
            b"*-1\r\n",
            b"*1\r\n:5\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$99999999999\r\n",
            b"*1\r\n$1\r\nab\r\n",
            b"*1x\r\n",
            b"+PING\r\n",
        ] {
            assert!(matches!(parse(bad, LIMITS), Frame::Refused(_)), "{bad:?}");
        }
    }

    #[test]
    fn an_announced_length_over_the_limit_is_refused_before_its_bytes() {
        assert!(matches!(
            parse(b"*1\r\n$2000\r\n", LIMITS),
            Frame::Refused(why) if why.contains("larger than 1024")
        ));
        assert!(matches!(
            parse(b"*2\r\n$500\r\n", Limits { request: 400 }),
            Frame::Refused(_)
        ));
    }
}
