//! `idmint completions SHELL` and `idmint man`: shell completions and manual pages generated
//! from the command line's own definition (clap_complete, clap_mangen), so they cannot drift
//! from what the binary accepts.
//!
//! Invariants: generation reads only the `clap::Command` it is given and writes only to stdout
//! or to files named after the commands in the directory the user gave (`--out-dir`, which
//! must exist); nothing else is touched. Pages are pure ASCII (other characters become groff
//! escapes), so they render with `groff` alone as with `man`.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The completion script of `command` for `shell`.
pub fn completions(mut command: clap::Command, shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    let name = command.get_name().to_owned();
    clap_complete::generate(shell, &mut command, name, &mut out);
    out
}

/// The manual pages of `command`: `(file name, roff)` for the command (`idmint.1`) and each
/// subcommand at any depth (`idmint-serve.1`, `idmint-admin-reseed.1`, ...), as `man` and
/// `git` name theirs. Hidden subcommands and `help` are left out.
pub fn man_pages(command: clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    let mut command = command;
    // Building gives every subcommand its display name: `idmint-serve`, `idmint-admin-reseed`.
    command.build();
    // Every page's footer names the program and its version, not the subcommand.
    let source = match command.get_version() {
        Some(version) => format!("{} {version}", command.get_name()),
        None => command.get_name().to_owned(),
    };
    let mut pages = Vec::new();
    add_pages(&command, &source, &mut pages)?;
    Ok(pages)
}

fn add_pages(
    command: &clap::Command,
    source: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let name = command
        .get_display_name()
        .unwrap_or_else(|| command.get_name())
        .to_owned();
    let mut roff = Vec::new();
    clap_mangen::Man::new(command.clone())
        .source(source.to_owned())
        .render(&mut roff)
        .with_context(|| format!("rendering the manual page of {name}"))?;
    let roff = String::from_utf8(roff)
        .with_context(|| format!("the manual page of {name} is not UTF-8"))?;
    pages.push((format!("{name}.1"), ascii_roff(&roff).into_bytes()));
    for sub in command.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        add_pages(sub, source, pages)?;
    }
    Ok(())
}

/// `roff` with every character outside ASCII as groff's `\[uXXXX]` escape: troff reads its
/// input as Latin-1, so raw UTF-8 (a help text's `…`) renders as garbage with a warning unless
/// `preconv` runs first, which `man` does and `groff` alone does not.
fn ascii_roff(roff: &str) -> String {
    let mut out = String::with_capacity(roff.len());
    for c in roff.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out
}

/// Writes `pages` into `dir` (which must exist), one file each; answers the paths written.
pub fn write_pages(dir: &Path, pages: &[(String, Vec<u8>)]) -> Result<Vec<String>> {
    if !dir.is_dir() {
        bail!("--out-dir {}: not a directory", dir.display());
    }
    let mut written = Vec::new();
    for (file, roff) in pages {
        let path = dir.join(file);
        std::fs::write(&path, roff).with_context(|| format!("writing {}", path.display()))?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("tool")
            .about("A tool.")
            .subcommand(
                clap::Command::new("run")
                    .about("Run it.")
                    .subcommand(clap::Command::new("fast").about("Quickly.")),
            )
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn a_page_per_visible_subcommand_named_like_git() {
        let pages = man_pages(command()).unwrap();
        let names: Vec<_> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["tool.1", "tool-run.1", "tool-run-fast.1"]);
        let top = String::from_utf8(pages[0].1.clone()).unwrap();
        assert!(top.starts_with(".ie"), "{top}");
        assert!(top.contains(".TH tool 1"), "{top}");
        let sub = String::from_utf8(pages[2].1.clone()).unwrap();
        assert!(sub.contains(".TH tool-run-fast 1"), "{sub}");
    }

    #[test]
    fn non_ascii_becomes_groff_unicode_escapes() {
        assert_eq!(ascii_roff("a … b\n"), "a \\[u2026] b\n");
        assert_eq!(ascii_roff("é→😀"), "\\[u00E9]\\[u2192]\\[u1F600]");
        assert_eq!(ascii_roff(".TH idmint 1\n"), ".TH idmint 1\n");
    }

    #[test]
    fn completions_name_the_subcommands() {
        let script = String::from_utf8(completions(command(), clap_complete::Shell::Bash)).unwrap();
        assert!(
            script.contains("run") && script.contains("fast"),
            "{script}"
        );
    }
}
