//! `probes.hlog`: the probe latencies of each interval as an HdrHistogram interval log, the
//! format jHiccup, HdrHistogram's `HistogramLogProcessor` and HdrHistogram Log Analyzer read, so
//! a run's latency over time can be plotted and merged with other tools' logs.
//!
//! The lines are the `hdrhistogram` crate's own (its interval-log writer, V2 + deflate encoding),
//! not ours: what it writes, its `IntervalLogIterator` and the Java reader parse. Values are
//! microseconds. Each interval is built in memory and written to the file in one call, then
//! flushed, so a run that is killed leaves a file whose every line parses (the same rule as the
//! CSV exports' [`RowAppender`](crate::output::export::RowAppender)).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};

/// The file's name in a run's `--out` directory.
pub const PROBES_HLOG: &str = "probes.hlog";

/// The format version the Java `HistogramLogWriter` stamps its logs with; readers look for it.
pub const LOG_FORMAT_VERSION_LINE: &str = "#[Histogram log format version 1.3]";

/// The column legend the Java writer puts before the first interval (its reader and the crate's
/// iterator both skip it).
pub const LEGEND_LINE: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

/// Appends interval histograms to an HdrHistogram interval log, one whole line per interval.
pub struct HlogWriter {
    path: PathBuf,
    file: File,
    /// Kept between intervals: it reuses its compression buffers.
    serializer: V2DeflateSerializer,
    /// One interval's line, built here before it goes to the file in one write.
    line: Vec<u8>,
}

impl std::fmt::Debug for HlogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HlogWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HlogWriter {
    /// Creates (or truncates) `path` and writes the headers at once, so even a run that ends
    /// before its first interval leaves a valid log. `start_unix_us` is the run's wall-clock
    /// start (µs since the Unix epoch): it becomes both `StartTime` and `BaseTime`, so each
    /// interval's timestamp reads as seconds since the run started and lines up with the run's
    /// other exports (which count from the same anchor).
    pub fn create(path: &Path, start_unix_us: u64) -> Result<HlogWriter> {
        let file = crate::output::export::open_fresh(path)?;
        let mut writer = HlogWriter {
            path: path.to_path_buf(),
            file,
            serializer: V2DeflateSerializer::new(),
            line: Vec::new(),
        };
        let start = UNIX_EPOCH + Duration::from_micros(start_unix_us);
        writer.write_header(start)?;
        Ok(writer)
    }

    /// The headers, in the order the Java writer uses: comments, format version, StartTime,
    /// BaseTime, legend.
    fn write_header(&mut self, start: SystemTime) -> Result<()> {
        self.line.clear();
        let started = humantime::format_rfc3339_micros(start);
        IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "[Logged with holprobe {}: probe latency, values in microseconds (us), open-loop from each probe's intended send time; run started {started}]",
                env!("CARGO_PKG_VERSION"),
            ))
            .add_comment(&LOG_FORMAT_VERSION_LINE[1..])
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut self.line, &mut self.serializer)
            .with_context(|| format!("encoding the header of {}", self.path.display()))?;
        self.line.extend_from_slice(LEGEND_LINE.as_bytes());
        self.line.push(b'\n');
        self.write_line()
    }

    /// Appends the histogram of one interval and flushes it to the file. `interval_start_us`
    /// counts from the run's start (the `BaseTime`), `interval_len_us` is how long the interval
    /// lasted, and `tag` (no commas, spaces or line breaks) tells intervals of different
    /// series apart, e.g. one per probe command or target.
    pub fn append(
        &mut self,
        interval_start_us: u64,
        interval_len_us: u64,
        hist: &Histogram<u64>,
        tag: Option<&str>,
    ) -> Result<()> {
        let tag = match tag {
            Some(text) => Some(Tag::new(text).ok_or_else(|| {
                anyhow!(
                    "tag '{text}' for {} may not contain a comma, a space or a line break",
                    self.path.display()
                )
            })?),
            None => None,
        };
        self.line.clear();
        // A builder with no headers writes nothing but the intervals it is given: one line here.
        IntervalLogWriterBuilder::new()
            .begin_log_with(&mut self.line, &mut self.serializer)
            .and_then(|mut log| {
                log.write_histogram(
                    hist,
                    Duration::from_micros(interval_start_us),
                    Duration::from_micros(interval_len_us),
                    tag,
                )
                .map_err(|err| std::io::Error::other(err.to_string()))
            })
            .with_context(|| format!("encoding an interval for {}", self.path.display()))?;
        self.write_line()
    }

    /// Writes the pending line(s) in one call and flushes them.
    fn write_line(&mut self) -> Result<()> {
        self.file
            .write_all(&self.line)
            .and_then(|()| self.file.flush())
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.line.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    use super::*;

    /// 2021-01-01T00:00:00.123456Z.
    const START_UNIX_US: u64 = 1_609_459_200_123_456;

    fn histogram(values: &[u64]) -> Histogram<u64> {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for &value in values {
            hist.record(value).unwrap();
        }
        hist
    }

    #[test]
    fn three_intervals_read_back_with_their_counts_maxima_tags_and_times() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROBES_HLOG);
        let mut writer = HlogWriter::create(&path, START_UNIX_US).unwrap();
        let intervals: [(u64, u64, Vec<u64>, Option<&str>); 3] = [
            (0, 1_000_000, vec![100, 120, 130], None),
            (1_000_000, 1_000_000, vec![90, 250_000], Some("ping")),
            // A late, shorter interval with one slow probe and sub-ms start/length (kept to ms).
            (2_500_000, 400_000, vec![5_000_000], Some("get")),
        ];
        for (start_us, len_us, values, tag) in &intervals {
            writer
                .append(*start_us, *len_us, &histogram(values), *tag)
                .unwrap();
        }

        let bytes = std::fs::read(&path).unwrap();
        let mut deserializer = Deserializer::new();
        let mut start_times = Vec::new();
        let mut base_times = Vec::new();
        let mut read = Vec::new();
        for entry in IntervalLogIterator::new(&bytes) {
            match entry.unwrap() {
                LogEntry::StartTime(t) => start_times.push(t),
                LogEntry::BaseTime(t) => base_times.push(t),
                LogEntry::Interval(interval) => {
                    let encoded = interval.encoded_histogram();
                    let raw = STANDARD.decode(encoded).unwrap();
                    let hist: Histogram<u64> =
                        deserializer.deserialize(&mut raw.as_slice()).unwrap();
                    read.push((
                        interval.start_timestamp(),
                        interval.duration(),
                        interval.max(),
                        interval.tag().map(|t| t.as_str().to_string()),
                        hist,
                    ));
                }
            }
        }
        // The header's times are written to the millisecond.
        let start_ms = Duration::from_millis(START_UNIX_US / 1000);
        assert_eq!(start_times, [start_ms]);
        assert_eq!(base_times, [start_ms]);
        assert_eq!(read.len(), 3);
        for ((start_us, len_us, values, tag), (start, len, max, read_tag, hist)) in
            intervals.iter().zip(&read)
        {
            assert_eq!(*start, Duration::from_micros(*start_us));
            assert_eq!(*len, Duration::from_micros(*len_us));
            assert_eq!(read_tag.as_deref(), *tag);
            assert_eq!(hist.len(), values.len() as u64);
            let want_max = *values.iter().max().unwrap();
            assert!(hist.equivalent(hist.max(), want_max), "{}", hist.max());
            assert_eq!(*max, hist.max() as f64, "the line's max is in µs");
            assert_eq!(hist, &histogram(values));
        }
    }

    #[test]
    fn the_file_starts_with_the_standard_headers_and_has_them_before_any_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROBES_HLOG);
        drop(HlogWriter::create(&path, START_UNIX_US).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[0].starts_with(&format!(
                "#[Logged with holprobe {}: ",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(lines[0].contains("microseconds"), "{text}");
        assert!(lines[0].contains("2021-01-01T00:00:00.123456Z"), "{text}");
        assert_eq!(lines[1], LOG_FORMAT_VERSION_LINE);
        assert_eq!(
            lines[2],
            "#[StartTime: 1609459200.123 (seconds since epoch)]"
        );
        assert_eq!(
            lines[3],
            "#[BaseTime: 1609459200.123 (seconds since epoch)]"
        );
        assert_eq!(lines[4], LEGEND_LINE);
        assert!(text.ends_with('\n'));
        // A header-only log is a valid, empty one.
        let entries: Vec<_> = IntervalLogIterator::new(text.as_bytes())
            .map(Result::unwrap)
            .collect();
        assert_eq!(entries.len(), 2, "StartTime and BaseTime only");
    }

    #[test]
    fn each_append_reaches_the_file_as_a_whole_line_before_the_writer_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROBES_HLOG);
        let mut writer = HlogWriter::create(&path, START_UNIX_US).unwrap();
        for i in 0..3u64 {
            writer
                .append(i * 1_000_000, 1_000_000, &histogram(&[i + 1; 10]), None)
                .unwrap();
            // Read while the writer is still open, as after a kill: nothing is held back.
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.ends_with('\n'));
            let intervals = IntervalLogIterator::new(text.as_bytes())
                .map(Result::unwrap)
                .filter(|e| matches!(e, LogEntry::Interval(_)))
                .count();
            assert_eq!(intervals as u64, i + 1);
        }
    }

    #[test]
    fn a_bad_tag_or_an_unwritable_path_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROBES_HLOG);
        let mut writer = HlogWriter::create(&path, START_UNIX_US).unwrap();
        let err = writer
            .append(0, 1_000_000, &histogram(&[1]), Some("two words"))
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("two words") && text.contains(PROBES_HLOG),
            "{text}"
        );

        let missing = dir.path().join("no-such-dir").join(PROBES_HLOG);
        let err = HlogWriter::create(&missing, START_UNIX_US).unwrap_err();
        assert!(format!("{err:#}").contains("no-such-dir"), "{err:#}");
    }
}
