//! The docs and `--help` do not part: every `--flag` that README.md or docs/*.md names (in
//! backticks or in a code block) is a flag of `probe` or of one of its subcommands, as their
//! `--help` lists them; the exceptions are other tools' flags, named below with their tool. Every
//! CSV file docs/exports.md describes has, in its table, the columns the code writes, in their
//! order. And the README stays a page a newcomer reads: at most 15,000 bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The subcommands whose `--help` counts, besides `probe --help` itself.
const SUBCOMMANDS: [&str; 6] = ["calibrate", "populate", "load", "clean", "compare", "keys"];

/// Flags the docs name that belong to another tool, each with that tool. Only `--long` flags
/// are checked, so single-dash ones (redis-benchmark's `-t get -c 50`, redis-cli's `-x`,
/// HdrHistogram's `-outputValueUnitRatio`) need no entry.
const OTHER_TOOLS: [(&str, &str); 23] = [
    // redis-server's command line, as the embedded server is started (docs/usage.md, Target).
    ("--save", "redis-server"),
    ("--appendonly", "redis-server"),
    ("--enable-debug-command", "redis-server"),
    // redis-cli's mode that observe mode's report lines imitate.
    ("--latency-history", "redis-cli"),
    // redis-benchmark's CSV output, in the load comparison (docs/load.md).
    ("--csv", "redis-benchmark"),
    // cargo: building, benchmarks and examples.
    ("--release", "cargo"),
    ("--locked", "cargo"),
    ("--bench", "cargo"),
    ("--example", "cargo"),
    ("--test", "cargo"),
    ("--ignored", "cargo test (docs/keys.md)"),
    ("--nocapture", "cargo test (docs/keys.md)"),
    // redis-cli's big-key modes, which probe keys is set against (docs/keys.md).
    ("--bigkeys", "redis-cli"),
    ("--memkeys", "redis-cli"),
    // The cargo examples' own flags (docs/usage.md, docs/load.md).
    ("--sizes", "examples/benchmark_2017.rs"),
    ("--command", "examples/custom_command.rs"),
    ("--runs", "examples/load_vs_redis_benchmark.rs"),
    // scripts/servers.sh (docs/results.md).
    ("--args", "scripts/servers.sh"),
    ("--no-fetch", "scripts/servers.sh"),
    // perf, as the glibc builds' deferred free was profiled (docs/methodology.md).
    ("--call-graph", "perf record"),
    // analysis/timeline.py and analysis/nodes.py: which write or window to draw.
    ("--write", "analysis/timeline.py"),
    ("--from", "analysis/timeline.py"),
    ("--to", "analysis/timeline.py"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The docs a user reads: README.md and every docs/*.md.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds no .md file");
    files.extend(docs);
    files
}

/// `--name` tokens in `text`: two dashes not preceded by a word character or a dash, then a
/// lowercase letter and letters, digits or dashes.
fn long_flags(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i + 2 < b.len() {
        let starts = b[i] == b'-'
            && b[i + 1] == b'-'
            && b[i + 2].is_ascii_lowercase()
            && (i == 0
                || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'-'));
        if !starts {
            i += 1;
            continue;
        }
        let mut end = i + 2;
        while end < b.len()
            && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'-')
        {
            end += 1;
        }
        found.push(text[i..end].trim_end_matches('-').to_string());
        i = end;
    }
    found
}

/// The code a Markdown file shows: the lines of its fenced blocks, and its inline `spans`.
fn code_of(markdown: &str) -> Vec<String> {
    let mut code = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            code.push(line.to_string());
        } else {
            code.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    code
}

/// Every flag the docs name, with the files that name it.
fn doc_flags() -> BTreeMap<String, BTreeSet<String>> {
    let mut flags: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).expect("doc readable");
        let name = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for span in code_of(&text) {
            for flag in long_flags(&span) {
                flags.entry(flag).or_default().insert(name.clone());
            }
        }
    }
    flags
}

/// The long flag an option line of clap's help defines (`      --url <URL>`, `  -h, --help`);
/// flags only mentioned in a description (`as redis-cli --latency-history does`) are not.
fn defined_flag(line: &str) -> Option<String> {
    let line = line.trim_start();
    let b = line.as_bytes();
    let long = if line.starts_with("--") {
        line
    } else if b.len() > 4 && b[0] == b'-' && b[1] != b'-' && &line[2..4] == ", " {
        &line[4..]
    } else {
        return None;
    };
    long_flags(long)
        .into_iter()
        .next()
        .filter(|f| long.starts_with(f.as_str()))
}

/// Old names the tool still accepts but `--help` does not show, each with the flag it names now
/// (which must be in `--help`): the docs may name them where they say so.
const HIDDEN_ALIASES: [(&str, &str); 1] = [("--seed", "--random-state")];

/// Every `--flag` that `probe --help` or a subcommand's `--help` defines.
fn help_flags() -> BTreeSet<String> {
    let mut helps = vec![vec!["--help"]];
    helps.extend(SUBCOMMANDS.iter().map(|s| vec![*s, "--help"]));
    let mut flags = BTreeSet::new();
    for args in helps {
        let out = Command::cargo_bin("probe")
            .expect("probe binary")
            .args(&args)
            .output()
            .expect("probe runs");
        assert!(
            out.status.success(),
            "probe {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("help is UTF-8");
        let defined: Vec<String> = text.lines().filter_map(defined_flag).collect();
        assert!(
            defined.len() > 3,
            "probe {} defines no flags: {text}",
            args.join(" ")
        );
        flags.extend(defined);
    }
    flags
}

#[test]
fn every_flag_the_docs_name_is_in_help() {
    let help = help_flags();
    let docs = doc_flags();
    let others: BTreeMap<&str, &str> = OTHER_TOOLS.into_iter().collect();
    let unknown: Vec<String> = docs
        .iter()
        .filter(|(flag, _)| !help.contains(*flag) && !others.contains_key(flag.as_str()))
        .filter(|(flag, _)| {
            !HIDDEN_ALIASES
                .iter()
                .any(|(alias, now)| alias == flag && help.contains(*now))
        })
        .map(|(flag, files)| {
            format!(
                "{flag} (in {})",
                files.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "flags named in the docs that no `probe ... --help` lists (a typo, a removed flag, or \
         another tool's flag to add to OTHER_TOOLS with its tool): {unknown:?}"
    );
}

#[test]
fn the_exceptions_are_other_tools_flags_the_docs_name() {
    let help = help_flags();
    let docs = doc_flags();
    for (flag, tool) in OTHER_TOOLS {
        assert!(
            !help.contains(flag),
            "{flag} is listed as {tool}'s, but `probe` has it: remove it from OTHER_TOOLS"
        );
        assert!(
            docs.contains_key(flag),
            "{flag} ({tool}) is no longer named in the docs: remove it from OTHER_TOOLS"
        );
    }
}

#[test]
fn the_scanner_finds_flags_in_code_only() {
    let md = "Prose --not-code, `--writer-sizes 64M` and `x--y`.\n```sh\nprobe --url redis://h --dry-run\n```\n";
    let flags: Vec<String> = code_of(md).iter().flat_map(|s| long_flags(s)).collect();
    assert_eq!(flags, ["--writer-sizes", "--url", "--dry-run"]);
    assert_eq!(defined_flag("      --url <URL>").as_deref(), Some("--url"));
    assert_eq!(defined_flag("  -h, --help").as_deref(), Some("--help"));
    assert_eq!(
        defined_flag("          as redis-cli --latency-history does"),
        None
    );
}

#[test]
fn readme_is_at_most_15000_bytes() {
    let size = std::fs::metadata(Path::new(&root()).join("README.md"))
        .expect("README.md")
        .len();
    assert!(
        size <= 15_000,
        "README.md is {size} bytes: at most 15,000; move the detail to docs/"
    );
}

#[test]
fn readme_says_seed_at_most_once() {
    // The 2017 benchmark this project grew from may be called its seed once, in its history;
    // elsewhere the word means nothing to a reader.
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let count = text.to_lowercase().matches("seed").count();
    assert!(
        count <= 1,
        "README.md says \"seed\" {count} times: at most once, in the 2017 benchmark's history"
    );
}

/// The column tables of an exports page: for each paragraph that opens with a CSV file's name
/// in bold (`**probes.csv** — one row per probe`), the columns the first cells of the table
/// after it name, in order (a cell may name several: `` `p50_us`, `p99_us` ``).
fn doc_column_tables(markdown: &str) -> Vec<(String, Vec<String>)> {
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    let mut file: Option<String> = None;
    let mut in_table = false;
    for line in markdown.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("**") {
            let name = rest.split("**").next().unwrap_or_default();
            file = name.ends_with(".csv").then(|| name.to_string());
            if let Some(name) = &file {
                tables.push((name.clone(), Vec::new()));
            }
            in_table = false;
            continue;
        }
        if file.is_none() {
            continue;
        }
        if !line.starts_with('|') {
            if in_table {
                // The table is over: prose after it names no column.
                file = None;
                in_table = false;
            }
            continue;
        }
        let first = line.split('|').nth(1).unwrap_or_default().trim();
        let separator = first.chars().all(|c| c == '-' || c == ':');
        if !in_table || separator {
            // The header row (`| column | meaning |`), then the separator.
            in_table = true;
            continue;
        }
        let columns = first.split('`').skip(1).step_by(2).map(str::to_string);
        tables.last_mut().expect("a file's table").1.extend(columns);
    }
    tables
}

#[test]
fn the_exports_page_lists_every_csvs_columns_in_order() {
    let path = root().join("docs/exports.md");
    let text = std::fs::read_to_string(&path).expect("docs/exports.md");
    let tables = doc_column_tables(&text);
    let code = holprobe::output::export::columns::BY_FILE;
    for (file, columns) in code {
        let found: Vec<&Vec<String>> = tables
            .iter()
            .filter(|(name, _)| name == file)
            .map(|(_, columns)| columns)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "docs/exports.md should describe {file} in one table (a paragraph opening with \
             **{file}**, then its table), not {}",
            found.len()
        );
        assert_eq!(
            found[0], columns,
            "docs/exports.md's table of {file} (left) is not the columns the code writes (right), \
             in order: add, remove or reorder its rows"
        );
    }
    for (name, _) in &tables {
        assert!(
            code.iter().any(|(file, _)| file == name),
            "docs/exports.md has a table of {name}, a file the code does not write"
        );
    }
}

#[test]
fn the_column_tables_are_read_as_written() {
    let md = "**a.csv** — rows\n\n| column | meaning |\n|---|---|\n| `x` | one |\n\
              | `p50_us`, `p99_us` | two, `not_a_column` |\n\nProse `later`.\n\n\
              **Which node**\n\n| column | meaning |\n|---|---|\n| `node` | n |\n";
    assert_eq!(
        doc_column_tables(md),
        [(
            "a.csv".to_string(),
            vec!["x".into(), "p50_us".into(), "p99_us".into()]
        )]
    );
}
