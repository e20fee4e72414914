//! A run's interleaving in words, and its hash.
//!
//! Every decision of a run (an action, a fault the authority wrapper injected, an answer a
//! node gave) is one line, stamped with the world's simulated time. The hash folds every line
//! in order (FNV-1a), so two runs of one seed have the same hash exactly when they made the
//! same decisions in the same order and the nodes answered the same. Lines hold no paths,
//! addresses or random keys, only what the seed decides and what the nodes answer.

/// The lines of a run and their running hash.
#[derive(Debug)]
pub struct Trace {
    lines: Vec<String>,
    hash: u64,
    now_us: u64,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            lines: Vec::new(),
            hash: 0xcbf2_9ce4_8422_2325,
            now_us: 0,
        }
    }
}

impl Trace {
    /// Sets the simulated time the next lines are stamped with.
    pub fn at(&mut self, now_us: u64) {
        self.now_us = now_us;
    }

    /// Adds a line. A process id in it (lease holders name `host pid N`) reads `pid _`: it
    /// is not the seed's.
    pub fn line(&mut self, text: impl Into<String>) {
        let line = format!(
            "{:>5}.{:03} ms  {}",
            self.now_us / 1000,
            self.now_us % 1000,
            without_pids(&text.into())
        );
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.lines.push(line);
    }

    /// The hash of every line so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> Vec<String> {
        self.lines[self.lines.len().saturating_sub(n)..].to_vec()
    }

    /// Every line.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }
}

/// `text` with the digits after every `pid ` replaced by `_`.
fn without_pids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("pid ") {
        out.push_str(&rest[..at + 4]);
        rest = &rest[at + 4..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push('_');
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_follows_every_line_and_its_time() {
        let mut a = Trace::default();
        let mut b = Trace::default();
        a.line("x");
        b.line("x");
        assert_eq!(a.hash(), b.hash());
        b.at(1);
        a.line("y");
        b.line("y");
        assert_ne!(a.hash(), b.hash(), "the same words at another time");
        assert_eq!(a.tail(1), vec!["    0.000 ms  y".to_string()]);
    }

    #[test]
    fn process_ids_are_not_traced() {
        assert_eq!(
            without_pids("0 by vm pid 20676 (x); 1 by pid 7, pid x"),
            "0 by vm pid _ (x); 1 by pid _, pid x"
        );
    }
}
