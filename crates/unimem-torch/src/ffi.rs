//! The C entry points. Each one catches what goes wrong (an error or a panic) and turns it
//! into a return code, keeping the message for `unimem_last_error` on the calling thread.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use unimem_core::AccessMode;

use crate::bridge::{Bridge, Options, TouchedRange};

/// The process's bridge, once enabled.
static BRIDGE: RwLock<Option<Arc<Bridge>>> = RwLock::new(None);

thread_local! {
    /// The last error on this thread, for `unimem_last_error`.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// The operator this thread is running (between `unimem_op_begin` and `unimem_op_end`):
    /// what it allocates is its output or workspace.
    static CURRENT_OP: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The last stats JSON handed out on this thread (valid until the next call).
    static STATS: RefCell<CString> = RefCell::new(CString::default());
}

/// Access mode codes of `unimem_op_begin`'s `modes`.
pub const UNIMEM_READ: u8 = 1;
pub const UNIMEM_WRITE: u8 = 2;
pub const UNIMEM_READ_WRITE: u8 = 3;

fn set_error(message: String) {
    tracing::debug!(%message, "unimem_torch call failed");
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// Runs `f`, turning an error or a panic into `on_error` and the thread's last error.
fn guarded<T>(what: &str, on_error: T, f: impl FnOnce() -> Result<T, String>) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_error(format!("{what}: {e}"));
            on_error
        }
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_error(format!("{what}: internal error: {why}"));
            on_error
        }
    }
}

fn bridge() -> Result<Arc<Bridge>, String> {
    let guard = BRIDGE.read().unwrap_or_else(|e| e.into_inner());
    guard.clone().ok_or_else(|| "unimem is not enabled (call unimem_enable first)".to_string())
}

/// A C string argument: `None` for a null pointer or an empty string.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn opt_str(p: *const c_char, what: &str) -> Result<Option<String>, String> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's promise.
    let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| format!("{what} is not UTF-8"))?;
    Ok((!s.is_empty()).then(|| s.to_string()))
}

/// Starts this process's runtime. Each argument may be null (the configuration's value):
/// `budget` (`"50%"` of the device, or bytes such as `"8GiB"`), `policy` (`none`, `oracle`,
/// `advisor`), `config` (a unimem TOML file), `record` (write the program's trace v1 there),
/// `backend` (`auto`, `cuda`, `sim`). Returns 0, or -1 with the reason in
/// `unimem_last_error` (already enabled, a bad value, no GPU).
///
/// # Safety
/// Each argument is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn unimem_enable(
    budget: *const c_char,
    policy: *const c_char,
    config: *const c_char,
    record: *const c_char,
    backend: *const c_char,
) -> c_int {
    guarded("unimem_enable", -1, || {
        // SAFETY: the caller's promise, for each.
        let options = unsafe {
            Options {
                budget: opt_str(budget, "budget")?,
                policy: opt_str(policy, "policy")?,
                config: opt_str(config, "config")?.map(PathBuf::from),
                record: opt_str(record, "record")?.map(PathBuf::from),
                backend: opt_str(backend, "backend")?,
            }
        };
        let mut slot = BRIDGE.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Err("unimem is already enabled in this process".into());
        }
        *slot = Some(Arc::new(Bridge::open(&options).map_err(|e| e.to_string())?));
        Ok(0)
    })
}

/// Whether this process's runtime is running (1) or not (0).
#[no_mangle]
pub extern "C" fn unimem_enabled() -> c_int {
    BRIDGE.read().map(|b| b.is_some() as c_int).unwrap_or(0)
}

/// PyTorch's allocation: `size` bytes for `stream` on `device`. Null on failure (the reason
/// in `unimem_last_error`, also logged), which PyTorch reports as out of memory.
#[no_mangle]
pub extern "C" fn unimem_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    guarded("unimem_malloc", std::ptr::null_mut(), || {
        if size <= 0 {
            return Ok(std::ptr::null_mut());
        }
        if device != 0 {
            return Err(format!("device {device}: unimem's runtime manages device 0 of this process (set CUDA_VISIBLE_DEVICES per rank)"));
        }
        let b = bridge()?;
        let op = CURRENT_OP.with(|op| op.borrow().clone());
        match b.malloc(size as u64, stream as u64, op.as_deref()) {
            Ok(addr) => Ok(addr as *mut c_void),
            Err(e) => {
                tracing::error!(size, error = %e, "unimem_malloc failed");
                Err(e.to_string())
            }
        }
    })
}

/// PyTorch's free of a pointer `unimem_malloc` returned, after the work on `stream`. A
/// pointer that is not unimem's is reported in `unimem_last_error` and logged, and left alone.
#[no_mangle]
pub extern "C" fn unimem_free(ptr: *mut c_void, _size: isize, _device: c_int, stream: *mut c_void) {
    guarded("unimem_free", (), || {
        if ptr.is_null() {
            return Ok(());
        }
        // After unimem_disable the runtime is gone, its memory with it: nothing to free.
        let Ok(b) = bridge() else { return Ok(()) };
        b.free(ptr as u64, stream as u64).map_err(|e| {
            tracing::error!(ptr = ptr as u64, error = %e, "unimem_free failed");
            e.to_string()
        })
    })
}

/// Declares the operator `name` PyTorch is about to enqueue on `stream`: `n` ranges, each
/// its first byte's address `ptrs[i]`, its length `lens[i]` and its mode `modes[i]`
/// (`UNIMEM_READ`, `UNIMEM_WRITE` or `UNIMEM_READ_WRITE`; a write of part of an allocation
/// must be declared read-write: a write declares the old bytes dead). Returns once `stream`
/// waits for the data; 0, or -1 with the reason.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `ptrs`, `lens` and `modes` each point to `n`
/// elements (or `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn unimem_op_begin(
    name: *const c_char,
    ptrs: *const u64,
    lens: *const u64,
    modes: *const u8,
    n: usize,
    stream: *mut c_void,
) -> c_int {
    guarded("unimem_op_begin", -1, || {
        // SAFETY: the caller's promise.
        let name = unsafe { opt_str(name, "name")? }.unwrap_or_else(|| "op".into());
        let ranges = if n == 0 {
            Vec::new()
        } else {
            if ptrs.is_null() || lens.is_null() || modes.is_null() {
                return Err(format!("{name}: {n} ranges declared with a null array"));
            }
            // SAFETY: the caller's promise: n elements each.
            let (p, l, m) = unsafe {
                (
                    std::slice::from_raw_parts(ptrs, n),
                    std::slice::from_raw_parts(lens, n),
                    std::slice::from_raw_parts(modes, n),
                )
            };
            (0..n)
                .map(|i| {
                    let mode = match m[i] {
                        UNIMEM_READ => AccessMode::Read,
                        UNIMEM_WRITE => AccessMode::Write,
                        UNIMEM_READ_WRITE => AccessMode::ReadWrite,
                        other => return Err(format!("{name}: range {i} has mode {other}; expected 1 (read), 2 (write) or 3 (read-write)")),
                    };
                    Ok(TouchedRange { ptr: p[i], len: l[i], mode })
                })
                .collect::<Result<Vec<_>, String>>()?
        };
        let b = bridge()?;
        b.op_begin(&name, &ranges, stream as u64).map_err(|e| e.to_string())?;
        CURRENT_OP.with(|op| *op.borrow_mut() = Some(name));
        Ok(0)
    })
}

/// The operator declared last on this thread is enqueued in full on `stream`. 0, or -1.
#[no_mangle]
pub extern "C" fn unimem_op_end(stream: *mut c_void) -> c_int {
    guarded("unimem_op_end", -1, || {
        CURRENT_OP.with(|op| op.borrow_mut().take());
        bridge()?.op_end(stream as u64).map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Marks a step of the program (an iteration of its training loop). 0, or -1.
#[no_mangle]
pub extern "C" fn unimem_step() -> c_int {
    guarded("unimem_step", -1, || {
        bridge()?.step().map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// The counters as a JSON object (once unimem's own work issued so far is done), valid on
/// this thread until its next call; null on failure.
#[no_mangle]
pub extern "C" fn unimem_stats() -> *const c_char {
    guarded("unimem_stats", std::ptr::null(), || {
        let stats = bridge()?.stats().map_err(|e| e.to_string())?;
        let json = serde_json::to_string(&stats).map_err(|e| e.to_string())?;
        let json = CString::new(json).map_err(|e| e.to_string())?;
        Ok(STATS.with(|s| {
            *s.borrow_mut() = json;
            s.borrow().as_ptr()
        }))
    })
}

/// Completes the telemetry log (configuration key `telemetry.log`) once the work issued so
/// far is done: 0, or -1 on failure. Without a log, nothing happens.
#[no_mangle]
pub extern "C" fn unimem_close_telemetry() -> c_int {
    guarded("unimem_close_telemetry", -1, || {
        bridge()?.close_telemetry().map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Ends the trace being recorded (the file is complete when this returns): 1 if one was
/// written, 0 if none was being recorded, -1 on failure.
#[no_mangle]
pub extern "C" fn unimem_stop_recording() -> c_int {
    guarded("unimem_stop_recording", -1, || match bridge()?.stop_recording().map_err(|e| e.to_string())? {
        Some(_) => Ok(1),
        None => Ok(0),
    })
}

/// Stops this process's runtime and frees its memory: only once PyTorch holds no tensor of
/// it. 0, or -1 if it was not enabled.
#[no_mangle]
pub extern "C" fn unimem_disable() -> c_int {
    guarded("unimem_disable", -1, || {
        let bridge = BRIDGE.write().unwrap_or_else(|e| e.into_inner()).take();
        match bridge {
            Some(_) => Ok(0),
            None => Err("unimem is not enabled".into()),
        }
    })
}

/// The last error on this thread, or an empty string; valid until the thread's next failing
/// call.
#[no_mangle]
pub extern "C" fn unimem_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
