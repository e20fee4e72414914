//! A request frame's arguments read as a typed [`Command`], or the error line to answer.
//!
//! Invariants:
//! - Parsing is total: any list of byte strings is a [`Command`] or a [`Refusal`], never a
//!   panic. Command names are matched without regard to case, as Redis does.
//! - Arity errors read `ERR wrong number of arguments for 'incr' command` and unknown commands
//!   `ERR unknown command 'foo', with args beginning with: 'a' 'b' `: the shapes Redis writes
//!   and clients and `redis-cli` expect.
//! - Commands that would read or write keys (`GET`, `SET`, `DEL`, ...) are refused with an
//!   error saying idmint stores no keys; nothing pretends to store a value.
//! - Namespace names must be UTF-8 here; whether a name is valid (length, characters) is the
//!   node's check. Counts must be whole numbers here; whether one is allowed (at least 1, at
//!   most the node's limit) is the node's one count rule, as for every front-end.

use super::reply::Reply;
use crate::error::IdError;
use crate::namespace::route::ShardRoute;
use bytes::Bytes;

/// A request idmint answers; names and ids borrow from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `PING [message]`.
    Ping(Option<Bytes>),
    /// `ECHO message`.
    Echo(Bytes),
    /// `QUIT`: answer `+OK`, then close.
    Quit,
    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
    Hello {
        /// 2 or 3; `None` keeps the connection's protocol.
        protocol: Option<u8>,
        /// A connection name to set.
        name: Option<Bytes>,
        /// `AUTH user token`'s token (the user name is ignored).
        auth: Option<Bytes>,
    },
    /// `AUTH token` or `AUTH user token` (the user name is ignored): the bearer token of
    /// `[auth]` for the rest of the connection.
    Auth(&'a [u8]),
    /// `CLIENT SETNAME name`.
    ClientSetName(Bytes),
    /// `CLIENT GETNAME`.
    ClientGetName,
    /// `CLIENT ID`.
    ClientId,
    /// `CLIENT SETINFO LIB-NAME|LIB-VER value`: accepted and ignored.
    ClientSetInfo,
    /// `COMMAND [subcommand ...]`: an empty list (clients use it for hints only).
    Command,
    /// `INFO [section ...]`.
    Info,
    /// `SELECT 0` (the only database).
    Select,
    /// `CONFIG GET pattern ...`: the [`CONFIG_PARAMETERS`] whose names match a pattern (Redis's
    /// glob: `*`, `?`), in that order; nothing is configurable over RESP. `redis-benchmark`
    /// asks for `save` and `appendonly` at start-up.
    ConfigGet(Vec<(&'static str, &'static str)>),
    /// `INCR ns`: the next id.
    Incr(&'a str),
    /// `INCRBY ns n` / `IDMINT.INCRBY`: `n` consecutive ids, answered as the last.
    IncrBy(&'a str, u64),
    /// `IDMINT.NEXT ns [count] [SHARD s | KEY k]`: `count` ids (default 1), as an array; of
    /// shard `s`, or of key `k`'s shard, for a namespace whose node field is the data's shard.
    Next(&'a str, Option<u64>, Option<ShardRoute>),
    /// `IDMINT.BLOCK ns count`: one contiguous block of up to `count` ids, leased.
    Block(&'a str, u64),
    /// `IDMINT.GIVEBACK ns lease start end step`: the unused tail of a leased block.
    GiveBack {
        /// The namespace.
        name: &'a str,
        /// The lease `IDMINT.BLOCK` answered.
        lease: u64,
        /// The tail: `[start, end)` with `step`.
        start: u64,
        /// See `start`.
        end: u64,
        /// See `start`.
        step: u64,
    },
    /// `MULTI`: queue the next commands until `EXEC` (or `DISCARD`).
    Multi,
    /// `EXEC`: run the queued commands, in order.
    Exec,
    /// `DISCARD`: drop the queued commands.
    Discard,
    /// `IDMINT.DECODE ns id`.
    Decode(&'a str, &'a str),
    /// `IDMINT.REBASE ns above`: every id from now on is above `above` (scope admin).
    Rebase(&'a str, u64),
    /// `IDMINT.RETIRE ns`: the namespace hands out no id any more (scope admin).
    Retire(&'a str),
}

impl Command<'_> {
    /// Every value [`Command::name`] answers, in [`Command::index`] order.
    pub const NAMES: [&'static str; 24] = [
        "ping",
        "echo",
        "quit",
        "hello",
        "auth",
        "client setname",
        "client getname",
        "client id",
        "client setinfo",
        "command",
        "info",
        "select",
        "config get",
        "incr",
        "incrby",
        "idmint.next",
        "idmint.block",
        "idmint.decode",
        "idmint.rebase",
        "idmint.retire",
        "idmint.giveback",
        "multi",
        "exec",
        "discard",
    ];

    /// The command's position in [`Command::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            Command::Ping(_) => 0,
            Command::Echo(_) => 1,
            Command::Quit => 2,
            Command::Hello { .. } => 3,
            Command::Auth(_) => 4,
            Command::ClientSetName(_) => 5,
            Command::ClientGetName => 6,
            Command::ClientId => 7,
            Command::ClientSetInfo => 8,
            Command::Command => 9,
            Command::Info => 10,
            Command::Select => 11,
            Command::ConfigGet(_) => 12,
            Command::Incr(_) => 13,
            Command::IncrBy(..) => 14,
            Command::Next(..) => 15,
            Command::Block(..) => 16,
            Command::Decode(..) => 17,
            Command::Rebase(..) => 18,
            Command::Retire(_) => 19,
            Command::GiveBack { .. } => 20,
            Command::Multi => 21,
            Command::Exec => 22,
            Command::Discard => 23,
        }
    }

    /// The command's name, lower-case, as the metrics label it.
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

/// Why a request gets an error instead of an answer. [`Refusal::reply`] is the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The frame is not a non-empty array of bulk strings.
    NotACommand,
    /// A name idmint does not know.
    Unknown {
        /// The command as sent.
        name: String,
        /// The first arguments, as Redis quotes them.
        args: Vec<String>,
    },
    /// A command that reads or writes keys.
    Keys(String),
    /// The arguments' count does not fit the command (lower-case name, as Redis writes it).
    Arity(String),
    /// The arguments are wrong in another way (`ERR` + message).
    Syntax(String),
    /// `HELLO` asked for a protocol other than 2 or 3.
    NoProto,
    /// An argument the domain refuses (count, name).
    Invalid(IdError),
}

impl Refusal {
    /// The error reply.
    pub fn reply(&self) -> Reply {
        match self {
            Refusal::NotACommand => Reply::error(
                "ERR",
                "Protocol error: a request must be a non-empty array of bulk strings",
            ),
            Refusal::Unknown { name, args } => {
                let mut message = format!("unknown command '{name}', with args beginning with: ");
                for a in args {
                    message.push('\'');
                    message.push_str(a);
                    message.push_str("' ");
                }
                Reply::error("ERR", &message)
            }
            Refusal::Keys(name) => Reply::error(
                "ERR",
                &format!(
                    "'{name}' is not supported: idmint stores no keys; INCR <namespace> hands out \
                     the next id (see IDMINT.NEXT, IDMINT.BLOCK, IDMINT.DECODE)"
                ),
            ),
            Refusal::Arity(name) => Reply::error(
                "ERR",
                &format!("wrong number of arguments for '{name}' command"),
            ),
            Refusal::Syntax(message) => Reply::error("ERR", message),
            Refusal::NoProto => Reply::error("NOPROTO", "unsupported protocol version"),
            Refusal::Invalid(e) => super::error::reply_of(e),
        }
    }
}

/// Commands that read or write keys; refused by name so the message can say why.
const KEY_COMMANDS: &[&str] = &[
    "GET",
    "SET",
    "SETNX",
    "SETEX",
    "PSETEX",
    "MGET",
    "MSET",
    "MSETNX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "DEL",
    "UNLINK",
    "EXISTS",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "TTL",
    "PTTL",
    "PERSIST",
    "TYPE",
    "KEYS",
    "SCAN",
    "RENAME",
    "APPEND",
    "STRLEN",
    "DECR",
    "DECRBY",
    "INCRBYFLOAT",
    "HSET",
    "HGET",
    "HGETALL",
    "HDEL",
    "HINCRBY",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LRANGE",
    "SADD",
    "SREM",
    "SMEMBERS",
    "ZADD",
    "ZRANGE",
    "ZINCRBY",
    "FLUSHDB",
    "FLUSHALL",
    "DBSIZE",
    "XADD",
    "PUBLISH",
    "SUBSCRIBE",
    "EVAL",
    "EVALSHA",
    "WATCH",
    "UNWATCH",
];

/// Reads `args` (the request's bulk strings, the command name first).
pub fn parse<'a>(args: &[&'a [u8]]) -> Result<Command<'a>, Refusal> {
    let Some((name, rest)) = args.split_first() else {
        return Err(Refusal::NotACommand);
    };
    // Command names are short ASCII: upper-cased on the stack, no allocation per request.
    // Longer or non-UTF-8 names match nothing and are answered as unknown.
    let mut buf = [0u8; 16];
    let upper = match buf.get_mut(..name.len()) {
        Some(slot) => {
            slot.copy_from_slice(name);
            slot.make_ascii_uppercase();
            std::str::from_utf8(slot).unwrap_or("")
        }
        None => "",
    };
    let arity = |ok: bool| -> Result<(), Refusal> {
        if ok {
            Ok(())
        } else {
            Err(Refusal::Arity(upper.to_ascii_lowercase()))
        }
    };
    match upper {
        "PING" => {
            arity(rest.len() <= 1)?;
            Ok(Command::Ping(
                rest.first().map(|m| Bytes::copy_from_slice(m)),
            ))
        }
        "ECHO" => {
            arity(rest.len() == 1)?;
            Ok(Command::Echo(Bytes::copy_from_slice(rest[0])))
        }
        "QUIT" => Ok(Command::Quit),
        "HELLO" => hello(rest),
        "AUTH" => {
            arity(rest.len() == 1 || rest.len() == 2)?;
            Ok(Command::Auth(rest[rest.len() - 1]))
        }
        "CLIENT" => client(rest),
        "COMMAND" => Ok(Command::Command),
        "INFO" => Ok(Command::Info),
        "SELECT" => {
            arity(rest.len() == 1)?;
            if rest[0] == b"0" {
                Ok(Command::Select)
            } else {
                Err(Refusal::Syntax("DB index is out of range".into()))
            }
        }
        "CONFIG" => match rest.first().map(|s| s.to_ascii_uppercase()) {
            Some(sub) if sub == b"GET" => {
                arity(rest.len() >= 2)?;
                let patterns = &rest[1..];
                Ok(Command::ConfigGet(
                    CONFIG_PARAMETERS
                        .iter()
                        .filter(|(name, _)| patterns.iter().any(|p| glob(p, name.as_bytes())))
                        .copied()
                        .collect(),
                ))
            }
            _ => Err(Refusal::Syntax(
                "idmint answers CONFIG GET only: it is configured by idmint.toml".into(),
            )),
        },
        "INCR" => {
            arity(rest.len() == 1)?;
            Ok(Command::Incr(namespace(rest[0])?))
        }
        "INCRBY" | "IDMINT.INCRBY" => {
            arity(rest.len() == 2)?;
            Ok(Command::IncrBy(namespace(rest[0])?, count(rest[1])?))
        }
        "IDMINT.NEXT" => {
            arity(!rest.is_empty())?;
            next(rest[0], &rest[1..])
        }
        "IDMINT.BLOCK" => {
            arity(rest.len() == 2)?;
            Ok(Command::Block(namespace(rest[0])?, count(rest[1])?))
        }
        "IDMINT.GIVEBACK" => {
            arity(rest.len() == 5)?;
            Ok(Command::GiveBack {
                name: namespace(rest[0])?,
                lease: number(rest[1], "lease")?,
                start: number(rest[2], "start")?,
                end: number(rest[3], "end")?,
                step: number(rest[4], "step")?,
            })
        }
        "MULTI" => {
            arity(rest.is_empty())?;
            Ok(Command::Multi)
        }
        "EXEC" => {
            arity(rest.is_empty())?;
            Ok(Command::Exec)
        }
        "DISCARD" => {
            arity(rest.is_empty())?;
            Ok(Command::Discard)
        }
        "IDMINT.DECODE" => {
            arity(rest.len() == 2)?;
            let id = std::str::from_utf8(rest[1])
                .map_err(|_| Refusal::Invalid(IdError::InvalidId("the id is not UTF-8".into())))?;
            Ok(Command::Decode(namespace(rest[0])?, id))
        }
        "IDMINT.REBASE" => {
            arity(rest.len() == 2)?;
            Ok(Command::Rebase(
                namespace(rest[0])?,
                number(rest[1], "above")?,
            ))
        }
        "IDMINT.RETIRE" => {
            arity(rest.len() == 1)?;
            Ok(Command::Retire(namespace(rest[0])?))
        }
        other if KEY_COMMANDS.contains(&other) => Err(Refusal::Keys(other.to_owned())),
        _ => Err(Refusal::Unknown {
            name: quote(name),
            args: rest.iter().take(3).map(|a| quote(a)).collect(),
        }),
    }
}

/// What `CONFIG GET` answers, in Redis's parameter names: idmint keeps no snapshot and no
/// append-only file (every grant is durable in the authority before an id is handed out).
pub const CONFIG_PARAMETERS: [(&str, &str); 2] = [("save", ""), ("appendonly", "no")];

/// Whether `name` matches Redis's glob `pattern` (`*` any run, `?` one byte; case-insensitive,
/// as `CONFIG GET` is). Iterative with one backtrack point: linear in practice, never
/// recursive, whatever the pattern.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// An argument as an error message quotes it: lossy UTF-8, at most 128 characters.
fn quote(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).chars().take(128).collect()
}

fn namespace(arg: &[u8]) -> Result<&str, Refusal> {
    std::str::from_utf8(arg).map_err(|_| {
        Refusal::Invalid(IdError::InvalidRequest(
            "invalid namespace name: it is not UTF-8".into(),
        ))
    })
}

/// The usage of `IDMINT.NEXT`, as its syntax errors quote it.
const NEXT_USAGE: &str = "IDMINT.NEXT namespace [count] [SHARD shard | KEY key]";

/// `IDMINT.NEXT`'s arguments after the namespace `ns`: an optional count, then at most one of
/// `SHARD s` and `KEY k` (keywords in any case). Anything else is a syntax error.
fn next<'a>(ns: &'a [u8], mut args: &[&[u8]]) -> Result<Command<'a>, Refusal> {
    let syntax = |what: &str| Refusal::Syntax(format!("syntax error: {what}; {NEXT_USAGE}"));
    let keyword = |arg: &[u8]| {
        if arg.eq_ignore_ascii_case(b"SHARD") {
            Some("shard")
        } else if arg.eq_ignore_ascii_case(b"KEY") {
            Some("key")
        } else {
            None
        }
    };
    let mut n = None;
    if let Some((first, tail)) = args.split_first() {
        if keyword(first).is_none() {
            n = Some(count(first)?);
            args = tail;
        }
    }
    let mut route = None;
    while let Some((word, tail)) = args.split_first() {
        let Some(name) = keyword(word) else {
            return Err(syntax(&format!("unexpected '{}'", quote(word))));
        };
        let Some((value, tail)) = tail.split_first() else {
            return Err(syntax(&format!(
                "{} needs a value",
                name.to_ascii_uppercase()
            )));
        };
        if route.is_some() {
            return Err(syntax("give one of SHARD and KEY, once"));
        }
        let value = number(value, name)?;
        route = Some(match name {
            "shard" => ShardRoute::Shard(value),
            _ => ShardRoute::Key(value),
        });
        args = tail;
    }
    Ok(Command::Next(namespace(ns)?, n, route))
}

/// A count as a number; whether it is allowed is the node's count rule.
fn count(arg: &[u8]) -> Result<u64, Refusal> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| {
            Refusal::Invalid(IdError::InvalidCount(format!(
                "count must be a whole number, got {:?}",
                quote(arg)
            )))
        })
}

/// A decimal `u64` argument named `what`.
fn number(arg: &[u8], what: &str) -> Result<u64, Refusal> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| {
            Refusal::Invalid(IdError::InvalidRequest(format!(
                "{what} must be a whole number from 0 to 18446744073709551615, got {:?}",
                quote(arg)
            )))
        })
}

fn hello<'a>(rest: &[&[u8]]) -> Result<Command<'a>, Refusal> {
    let Some((version, options)) = rest.split_first() else {
        return Ok(Command::Hello {
            protocol: None,
            name: None,
            auth: None,
        });
    };
    let protocol = match *version {
        b"2" => 2,
        b"3" => 3,
        _ => return Err(Refusal::NoProto),
    };
    let mut name = None;
    let mut auth = None;
    let mut i = 0;
    while i < options.len() {
        let option = options[i].to_ascii_uppercase();
        match option.as_slice() {
            b"SETNAME" if i + 1 < options.len() => {
                name = Some(Bytes::copy_from_slice(options[i + 1]));
                i += 2;
            }
            b"AUTH" if i + 2 < options.len() => {
                auth = Some(Bytes::copy_from_slice(options[i + 2]));
                i += 3;
            }
            _ => {
                return Err(Refusal::Syntax(format!(
                    "syntax error in HELLO option '{}'",
                    quote(options[i])
                )))
            }
        }
    }
    Ok(Command::Hello {
        protocol: Some(protocol),
        name,
        auth,
    })
}

fn client<'a>(rest: &[&[u8]]) -> Result<Command<'a>, Refusal> {
    let Some((sub, args)) = rest.split_first() else {
        return Err(Refusal::Arity("client".into()));
    };
    let sub = String::from_utf8_lossy(sub).to_ascii_uppercase();
    let arity = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(Refusal::Arity(format!(
                "client|{}",
                sub.to_ascii_lowercase()
            )))
        }
    };
    match sub.as_str() {
        "SETNAME" => {
            arity(args.len() == 1)?;
            if args[0].iter().any(|b| *b <= b' ' || *b > b'~') {
                return Err(Refusal::Syntax(
                    "Client names cannot contain spaces, newlines or special characters.".into(),
                ));
            }
            Ok(Command::ClientSetName(Bytes::copy_from_slice(args[0])))
        }
        "GETNAME" => {
            arity(args.is_empty())?;
            Ok(Command::ClientGetName)
        }
        "ID" => {
            arity(args.is_empty())?;
            Ok(Command::ClientId)
        }
        "SETINFO" => {
            arity(args.len() == 2)?;
            Ok(Command::ClientSetInfo)
        }
        _ => Err(Refusal::Syntax(format!(
            "unknown subcommand '{}'. Try CLIENT SETNAME, GETNAME, ID or SETINFO.",
            quote(sub.as_bytes())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p<'a>(words: &[&'a str]) -> Result<Command<'a>, Refusal> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse(&args)
    }

    /// `CONFIG GET` answers the parameters its patterns match (what `redis-benchmark` reads
    /// at start-up), and nothing for a pattern that matches none.
    #[test]
    fn config_get_answers_matching_parameters() {
        assert_eq!(
            p(&["config", "get", "save"]),
            Ok(Command::ConfigGet(vec![("save", "")]))
        );
        assert_eq!(
            p(&["CONFIG", "GET", "*"]),
            Ok(Command::ConfigGet(CONFIG_PARAMETERS.to_vec()))
        );
        assert_eq!(
            p(&["CONFIG", "GET", "APPEND?NLY", "sa*"]),
            Ok(Command::ConfigGet(CONFIG_PARAMETERS.to_vec()))
        );
        assert_eq!(
            p(&["CONFIG", "GET", "maxmemory"]),
            Ok(Command::ConfigGet(Vec::new()))
        );
        assert!(matches!(p(&["CONFIG", "GET"]), Err(Refusal::Arity(_))));
        assert!(matches!(
            p(&["CONFIG", "SET", "save", ""]),
            Err(Refusal::Syntax(_))
        ));
    }

    #[test]
    fn glob_matches_as_redis_does() {
        for (pattern, name, matches) in [
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*c", "abbbc", true),
            ("a*c", "abbb", false),
            ("*o*y", "appendonly", true),
            ("?ave", "save", true),
            ("?ave", "ave", false),
            ("**", "x", true),
            ("s*v*", "save", true),
        ] {
            assert_eq!(
                glob(pattern.as_bytes(), name.as_bytes()),
                matches,
                "{pattern:?} {name:?}"
            );
        }
        // A pathological pattern ends promptly: no recursion, no exponential backtracking.
        let pattern = "*a".repeat(4096);
        assert!(!glob(pattern.as_bytes(), &[b'a'; 100]));
    }

    #[test]
    fn commands_parse_case_insensitively() {
        assert_eq!(p(&["incr", "orders"]), Ok(Command::Incr("orders")));
        assert_eq!(
            p(&["IdMint.Next", "orders", "5"]),
            Ok(Command::Next("orders", Some(5), None))
        );
        assert_eq!(
            p(&["IDMINT.NEXT", "orders"]),
            Ok(Command::Next("orders", None, None))
        );
        assert_eq!(
            p(&["IDMINT.GIVEBACK", "orders", "7", "10", "20", "1"]),
            Ok(Command::GiveBack {
                name: "orders",
                lease: 7,
                start: 10,
                end: 20,
                step: 1
            })
        );
        assert_eq!(p(&["multi"]), Ok(Command::Multi));
        assert_eq!(
            p(&["HELLO", "3", "setname", "me"]),
            Ok(Command::Hello {
                protocol: Some(3),
                name: Some(Bytes::from_static(b"me")),
                auth: None,
            })
        );
        assert_eq!(
            p(&["HELLO", "3", "AUTH", "default", "tok", "SETNAME", "me"]),
            Ok(Command::Hello {
                protocol: Some(3),
                name: Some(Bytes::from_static(b"me")),
                auth: Some(Bytes::from_static(b"tok")),
            })
        );
        assert_eq!(p(&["auth", "tok"]), Ok(Command::Auth(b"tok")));
        assert_eq!(p(&["AUTH", "default", "tok"]), Ok(Command::Auth(b"tok")));
    }

    #[test]
    fn refusals_read_like_redis() {
        assert_eq!(
            p(&["INCR"]).unwrap_err().reply(),
            Reply::Error("ERR wrong number of arguments for 'incr' command".into())
        );
        assert_eq!(
            p(&["FOO", "a", "b"]).unwrap_err().reply(),
            Reply::Error("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ".into())
        );
        assert!(matches!(p(&["get", "k"]), Err(Refusal::Keys(_))));
        assert_eq!(p(&["HELLO", "4"]), Err(Refusal::NoProto));
        // Whether 0 or 101 is allowed is the node's count rule, not the parser's.
        assert_eq!(
            p(&["IDMINT.NEXT", "a", "0"]),
            Ok(Command::Next("a", Some(0), None))
        );
        for bad in ["-1", "x", "", "+1"] {
            assert!(
                matches!(
                    p(&["IDMINT.NEXT", "a", bad]),
                    Err(Refusal::Invalid(IdError::InvalidCount(_)))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            p(&["IDMINT.BLOCK", "a", "1000"]),
            Ok(Command::Block("a", 1000))
        );
        let not_utf8: [&[u8]; 2] = [b"INCR", b"\xff"];
        assert!(matches!(
            parse(&not_utf8),
            Err(Refusal::Invalid(IdError::InvalidRequest(_)))
        ));
        assert_eq!(parse(&[]), Err(Refusal::NotACommand));
        // Longer than any command name, or not UTF-8: unknown, quoted as sent.
        for name in ["IDMINT.NEXT.AND.MORE.THAN.16", "\u{e9}t\u{e9}", ""] {
            assert_eq!(
                p(&[name]),
                Err(Refusal::Unknown {
                    name: name.into(),
                    args: vec![]
                })
            );
        }
    }

    #[test]
    fn next_takes_a_shard_or_a_key() {
        assert_eq!(
            p(&["IDMINT.NEXT", "photos", "5", "shard", "7"]),
            Ok(Command::Next("photos", Some(5), Some(ShardRoute::Shard(7))))
        );
        assert_eq!(
            p(&["idmint.next", "photos", "Key", "18446744073709551615"]),
            Ok(Command::Next(
                "photos",
                None,
                Some(ShardRoute::Key(u64::MAX))
            ))
        );
        // A namespace may be called SHARD: the first argument is always the namespace.
        assert_eq!(
            p(&["IDMINT.NEXT", "shard", "SHARD", "0"]),
            Ok(Command::Next("shard", None, Some(ShardRoute::Shard(0))))
        );
        for bad in [
            &["IDMINT.NEXT", "a", "SHARD"][..],
            &["IDMINT.NEXT", "a", "1", "KEY"],
            &["IDMINT.NEXT", "a", "SHARD", "1", "KEY", "2"],
            &["IDMINT.NEXT", "a", "KEY", "1", "key", "1"],
            &["IDMINT.NEXT", "a", "SHARD", "1", "5"],
            &["IDMINT.NEXT", "a", "1", "2"],
            &["IDMINT.NEXT", "a", "1", "NODE", "2"],
        ] {
            let refusal = p(bad).unwrap_err();
            assert!(
                matches!(refusal, Refusal::Syntax(_)),
                "{bad:?}: {refusal:?}"
            );
            let Reply::Error(line) = refusal.reply() else {
                panic!("{bad:?}: not an error line");
            };
            assert!(line.starts_with("ERR syntax error"), "{bad:?}: {line}");
        }
        for (bad, name) in [("x", "shard"), ("-1", "shard"), ("", "key")] {
            let keyword = name.to_ascii_uppercase();
            match p(&["IDMINT.NEXT", "a", &keyword, bad]) {
                Err(Refusal::Invalid(IdError::InvalidRequest(m))) => {
                    assert!(m.starts_with(name), "{m}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(matches!(p(&["IDMINT.NEXT"]), Err(Refusal::Arity(_))));
    }
}
