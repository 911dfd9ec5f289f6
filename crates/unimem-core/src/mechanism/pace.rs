//! A program's pace on a real clock: a replay holds each kernel to the host time the program
//! spent before issuing it ([`crate::seam::MemoryBackend::program_host_time`]), which a
//! backend on real time waits out on the host.

use std::time::{Duration, Instant};

/// Above this much left to wait the host sleeps (less a margin for waking), below it spins:
/// a program's gaps between kernels are tens to hundreds of microseconds, near a sleep's own
/// granularity.
const SLEEP_ABOVE: Duration = Duration::from_micros(300);
const WAKE_MARGIN: Duration = Duration::from_micros(200);

/// When the program issued its latest kernel, as the replay reproduces it.
#[derive(Debug, Default)]
pub(crate) struct IssuePace {
    last: Option<Instant>,
}

impl IssuePace {
    /// Returns once `host_ns` has passed since the previous kernel was issued (at once for
    /// the first, or where the backend's own work took longer); the next kernel is issued now.
    pub(crate) fn wait(&mut self, host_ns: u64) {
        if let Some(last) = self.last {
            let until = last + Duration::from_nanos(host_ns);
            loop {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                let left = until - now;
                if left > SLEEP_ABOVE {
                    std::thread::sleep(left - WAKE_MARGIN);
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        self.last = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_waits_for_its_host_time_after_the_one_before() {
        let mut pace = IssuePace::default();
        let t0 = Instant::now();
        pace.wait(50_000_000);
        assert!(t0.elapsed() < Duration::from_millis(40), "the first kernel has nothing to wait for");
        let t1 = Instant::now();
        pace.wait(2_000_000);
        pace.wait(1_000_000);
        // From just after the first kernel's issue: 3 ms less the instant between.
        assert!(t1.elapsed() >= Duration::from_micros(2_990), "{:?}", t1.elapsed());
        // Time already spent counts toward the next kernel's host time.
        std::thread::sleep(Duration::from_millis(5));
        let t2 = Instant::now();
        pace.wait(3_000_000);
        assert!(t2.elapsed() < Duration::from_millis(3), "{:?}", t2.elapsed());
    }
}
