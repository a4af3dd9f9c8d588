//! Where a collector's findings go: one sink per destination (the `--out` files and their
//! run.json checkpoints, the metrics endpoint, the terminal), each taking the findings it
//! cares for, as hyperfine's exporters and criterion's reports do. A collector files what its
//! threads send and hands every finding to its [`Sinks`]; it knows no file format, no metric,
//! no line of text. Each instrument has its vocabulary of findings (`F`: the probes' and the
//! load's), the trait is the same.

use anyhow::Result;

/// One destination of findings of kind `F`.
pub(crate) trait Sink<F: ?Sized> {
    /// Takes one finding (ignoring those it does not care for); an error is an export error,
    /// which ends the run.
    fn emit(&mut self, finding: &F) -> Result<()>;

    /// It shows the run to a person: it goes quiet once the run failed to write its exports,
    /// while the other sinks take what is left.
    fn is_terminal(&self) -> bool {
        false
    }

    /// It keeps the run's checkpoints (the findings as they stand, every few seconds): only
    /// then are they made.
    fn takes_checkpoints(&self) -> bool {
        false
    }
}

/// Every sink of a run, in the order they take each finding (the files first: an export error
/// stops a finding before the terminal shows it).
pub(crate) struct Sinks<S: ?Sized> {
    sinks: Vec<Box<S>>,
}

impl<S: ?Sized> Sinks<S> {
    /// No sink yet.
    pub fn new() -> Sinks<S> {
        Sinks { sinks: Vec::new() }
    }

    /// Adds a sink after the others.
    pub fn push(&mut self, sink: Box<S>) {
        self.sinks.push(sink);
    }

    /// Hands `finding` to every sink in turn; the first error stops it.
    pub fn emit<F: ?Sized>(&mut self, finding: &F) -> Result<()>
    where
        S: Sink<F>,
    {
        for sink in &mut self.sinks {
            sink.emit(finding)?;
        }
        Ok(())
    }

    /// Whether a checkpoint is worth making: some sink keeps it.
    pub fn take_checkpoints<F: ?Sized>(&self) -> bool
    where
        S: Sink<F>,
    {
        self.sinks.iter().any(|sink| sink.takes_checkpoints())
    }

    /// Drops the terminal sinks (after an export error, the rest is filed quietly).
    pub fn silence_terminal<F: ?Sized>(&mut self)
    where
        S: Sink<F>,
    {
        self.sinks.retain(|sink| !sink.is_terminal());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count {
        seen: Vec<u32>,
        fail_at: Option<u32>,
        terminal: bool,
    }

    impl Sink<u32> for Count {
        fn emit(&mut self, finding: &u32) -> Result<()> {
            anyhow::ensure!(self.fail_at != Some(*finding), "disk full at {finding}");
            self.seen.push(*finding);
            Ok(())
        }
        fn is_terminal(&self) -> bool {
            self.terminal
        }
    }

    /// A sink that keeps what it saw in a shared list, so the test can read it after the fan-out.
    struct Shared(std::rc::Rc<std::cell::RefCell<Count>>);

    impl Sink<u32> for Shared {
        fn emit(&mut self, finding: &u32) -> Result<()> {
            self.0.borrow_mut().emit(finding)
        }
        fn is_terminal(&self) -> bool {
            self.0.borrow().terminal
        }
    }

    fn count(fail_at: Option<u32>, terminal: bool) -> std::rc::Rc<std::cell::RefCell<Count>> {
        std::rc::Rc::new(std::cell::RefCell::new(Count {
            seen: Vec::new(),
            fail_at,
            terminal,
        }))
    }

    #[test]
    fn every_sink_takes_each_finding_in_order_and_an_error_stops_the_rest() {
        let (files, screen) = (count(Some(2), false), count(None, true));
        let mut sinks: Sinks<dyn Sink<u32>> = Sinks::new();
        sinks.push(Box::new(Shared(files.clone())));
        sinks.push(Box::new(Shared(screen.clone())));
        sinks.emit(&1).unwrap();
        let err = sinks.emit(&2).unwrap_err();
        assert!(err.to_string().contains("disk full at 2"), "{err}");
        sinks.emit(&3).unwrap();
        assert_eq!(files.borrow().seen, [1, 3]);
        // The failing file sink came first: the terminal never showed 2.
        assert_eq!(screen.borrow().seen, [1, 3]);
        sinks.silence_terminal::<u32>();
        sinks.emit(&4).unwrap();
        assert_eq!(files.borrow().seen, [1, 3, 4]);
        assert_eq!(screen.borrow().seen, [1, 3]);
    }
}
