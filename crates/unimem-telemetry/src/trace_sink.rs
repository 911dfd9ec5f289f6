//! A `tracing` sink: every telemetry record as a `tracing` event (target
//! `unimem::telemetry`), so that a program's own subscriber (logs, OpenTelemetry, tokio-console)
//! sees faults and migrations beside everything else, with the region's name.

use std::collections::HashMap;

use unimem_core::protocol::EventSink;
use unimem_core::seam::MemEvent;
use unimem_core::RegionId;

/// Emits records as `tracing` events: migrations and faults at `debug`, kernels at `trace`.
#[derive(Debug, Default)]
pub struct TracingSink {
    names: HashMap<RegionId, String>,
}

impl TracingSink {
    /// A sink with no regions known yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn name(&self, id: RegionId) -> &str {
        self.names.get(&id).map(String::as_str).unwrap_or("?")
    }
}

impl EventSink for TracingSink {
    fn region(
        &mut self,
        id: RegionId,
        bytes: u64,
        name: Option<&str>,
        address: u64,
    ) -> unimem_core::Result<()> {
        let name = name.map(str::to_string).unwrap_or_else(|| format!("region{}", id.0));
        tracing::debug!(target: "unimem::telemetry", region = id.0, bytes, name = %name, address, "region");
        self.names.insert(id, name);
        Ok(())
    }

    fn freed(&mut self, id: RegionId) -> unimem_core::Result<()> {
        tracing::debug!(target: "unimem::telemetry", region = id.0, name = %self.name(id), "freed");
        Ok(())
    }

    fn events(&mut self, events: &[MemEvent]) -> unimem_core::Result<()> {
        for e in events {
            match e {
                MemEvent::Migration { region, offset, bytes, dir, cause, start_ns, end_ns } => {
                    tracing::debug!(
                        target: "unimem::telemetry", region = region.0, name = %self.name(*region), offset, bytes,
                        dir = ?dir, cause = ?cause, start_ns, end_ns, "migration"
                    )
                }
                MemEvent::Fault { region, offset, bytes, by, at_ns } => tracing::debug!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), offset, bytes,
                    by = ?by, at_ns, "fault"
                ),
                MemEvent::Kernel { name, start_ns, end_ns, stall_ns, .. } => {
                    tracing::trace!(target: "unimem::telemetry", kernel = %name, start_ns, end_ns, stall_ns, "kernel")
                }
                MemEvent::PageWork { work, bytes, start_ns, end_ns } => tracing::trace!(
                    target: "unimem::telemetry", work = work.name(), bytes, start_ns, end_ns, "page work"
                ),
                MemEvent::Populate { region, bytes, on, .. } => tracing::trace!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), bytes, on = ?on, "populate"
                ),
                MemEvent::Hint { hint, region, bytes, reason, kernel, .. } => tracing::debug!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), hint = %hint,
                    bytes, reason = %reason, kernel, "hint"
                ),
                MemEvent::Forecast { kernel, hits, misses, false_alarms } => tracing::trace!(
                    target: "unimem::telemetry", kernel, hits, misses, false_alarms, "forecast"
                ),
                MemEvent::Released { region, at_ns } => tracing::trace!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), at_ns, "released"
                ),
                MemEvent::Relocated { region, from, to, at_ns } => tracing::debug!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), from, to, at_ns,
                    "relocated"
                ),
                MemEvent::Thrashing { region, offset, bytes, by, at_ns } => tracing::debug!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), offset, bytes,
                    by = ?by, at_ns, "thrashing"
                ),
                MemEvent::Throttling { region, offset, by, start_ns, end_ns } => tracing::debug!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), offset,
                    by = ?by, start_ns, end_ns, "throttling"
                ),
                MemEvent::RemoteMap { region, offset, bytes, cause, at_ns } => tracing::debug!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), offset, bytes,
                    cause = ?cause, at_ns, "remote map"
                ),
                MemEvent::Drop { region, bytes, from, .. } => tracing::trace!(
                    target: "unimem::telemetry", region = region.0, name = %self.name(*region), bytes, from = ?from, "drop"
                ),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::{Event, Subscriber};

    use super::*;
    use unimem_core::seam::{Direction, MigrationCause};

    /// Collects (message, name field) of the events it sees.
    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<(String, String)>>>);

    struct Fields {
        message: String,
        name: String,
    }

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            match field.name() {
                "message" => self.message = format!("{value:?}"),
                "name" => self.name = format!("{value:?}"),
                _ => {}
            }
        }
    }

    impl Subscriber for Collect {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut f = Fields { message: String::new(), name: String::new() };
            event.record(&mut f);
            self.0.lock().unwrap().push((f.message, f.name));
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn records_reach_the_subscriber_with_region_names() {
        let collect = Collect::default();
        let seen = collect.0.clone();
        tracing::subscriber::with_default(collect, || {
            let mut sink = TracingSink::new();
            sink.region(RegionId(7), 4096, Some("weights"), 1 << 40).unwrap();
            let m = MemEvent::Migration {
                region: RegionId(7),
                offset: 0,
                bytes: 4096,
                dir: Direction::H2D,
                cause: MigrationCause::Prefetch,
                start_ns: 1,
                end_ns: 2,
            };
            sink.events(&[m]).unwrap();
            sink.freed(RegionId(7)).unwrap();
        });
        let seen = seen.lock().unwrap();
        let messages: Vec<&str> = seen.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(messages, ["region", "migration", "freed"]);
        assert!(seen.iter().all(|(_, n)| n == "weights"), "{seen:?}");
    }
}
