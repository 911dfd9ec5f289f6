//! The CUDA backend's buffers made ahead (see [`crate::mechanism::ahead`]): a thread of its
//! own takes orders by size and makes each a managed buffer under the backend's
//! oversubscription guard, so that the thread issuing the program's kernels does not wait in
//! `cuMemAllocManaged`.

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::{CudaDevice, FreeMemory, ManagedBuffer};
use crate::error::Result;
use crate::mechanism::ahead::AheadStock;

/// See the module documentation.
pub(crate) struct AheadBuffers {
    stock: AheadStock<ManagedBuffer>,
    /// Orders to the maker (closed on drop, which ends it).
    orders: Option<Sender<u64>>,
    made: Receiver<(u64, Result<ManagedBuffer>)>,
    maker: Option<JoinHandle<()>>,
    /// Buffers the maker could not make (the guard refused, or the driver did).
    failures: u64,
}

impl AheadBuffers {
    /// A maker allocating on `dev` under `guard`, with at most `cap` bytes ordered and not
    /// taken. Where no thread can be started, orders are never made (allocations stay on the
    /// caller's thread).
    pub fn spawn(dev: CudaDevice, guard: FreeMemory, allow_oversubscription: bool, cap: u64) -> Self {
        let (order_tx, order_rx) = crossbeam_channel::unbounded::<u64>();
        let (made_tx, made_rx) = crossbeam_channel::unbounded();
        let maker = std::thread::Builder::new()
            .name("unimem-ahead".into())
            .spawn(move || {
                for bytes in order_rx {
                    let r = guard.alloc(&dev, bytes, allow_oversubscription);
                    if made_tx.send((bytes, r)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| tracing::warn!("no thread to make buffers ahead ({e}); allocations stay inline"))
            .ok();
        let orders = maker.as_ref().map(|_| order_tx);
        Self { stock: AheadStock::new(cap), orders, made: made_rx, maker, failures: 0 }
    }

    /// Orders a buffer of `bytes` (a buffer of the size retired), where the cap allows.
    pub fn order(&mut self, bytes: u64) {
        let Some(orders) = &self.orders else { return };
        if self.stock.order(bytes) && orders.send(bytes).is_err() {
            self.stock.failed(bytes);
        }
    }

    /// A buffer of exactly `bytes` made ahead, if one is ready.
    pub fn take(&mut self, bytes: u64) -> Option<ManagedBuffer> {
        while let Ok((b, r)) = self.made.try_recv() {
            match r {
                Ok(buf) => self.stock.made(b, buf),
                Err(e) => {
                    // The caller's own allocation of the size meets the same refusal, with its
                    // context, if it still stands then.
                    tracing::debug!("a buffer of {b} bytes was not made ahead: {e}");
                    self.stock.failed(b);
                    self.failures += 1;
                }
            }
        }
        self.stock.take(bytes)
    }

    /// Orders the maker could not make.
    pub fn failures(&self) -> u64 {
        self.failures
    }
}

impl Drop for AheadBuffers {
    fn drop(&mut self) {
        self.orders = None;
        if let Some(maker) = self.maker.take() {
            let _ = maker.join();
        }
    }
}
