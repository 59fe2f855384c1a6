//! The cpu backend of glint: every op of [`glint_backend::Backend`] in plain
//! Rust, made parallel with rayon on the backend's own thread pool.
//!
//! It is the oracle the WGSL kernels are tested against, so each op is
//! written to be plainly correct first: f32 activations, f64 where a sum or
//! an angle would otherwise lose precision (RMS sums, RoPE angles), and a
//! [`reference`] twin for every op whose fast loop is restructured.
//!
//! Weights are computed straight from the bytes they were given
//! ([`glint_backend::SharedBytes`], usually the model file's mmap): never copied.
//!
//! Ops run immediately on the calling thread's behalf; `sync` has nothing to wait for.
//! Each op takes read locks on its inputs and the write lock on its output.
#![deny(unsafe_code)]
// Kept as written before `is_multiple_of` (1.87) was in reach.
#![allow(clippy::manual_is_multiple_of)]

pub mod act;
pub mod amx;
mod attention;
pub mod conv;
mod elementwise;
mod matmul;
pub mod qdot;
pub mod reference;
mod rope;
mod tensor;
mod weights;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use glint_backend::{
    check, AttnParams, Backend, BackendError, GgmlType, Glu, KqMask, MemoryReport, Result,
    RopeParams, SharedBytes, TensorDesc, Unary, Usage,
};

pub use attention::{attention_window, attention_with, Cache, Far};
pub use matmul::{
    mul_mat_ggml, mul_mat_ggml_with, thread_scratch_bytes, Kernels, WeightRows, AMX_MIN_M,
    DECODE_MAX_M,
};
pub use rope::cos_sin as rope_cos_sin;
pub use tensor::CpuTensor;
pub use weights::{dequant_row, dot, row_dot};

use GgmlType::F16;

/// Ops over fewer elements than this run on the calling thread.
const SERIAL_BELOW: usize = 4 * elementwise::ELEMS_PER_TASK;

/// Integer-dot products with fewer multiply-adds than this (`k * n * m`;
/// e.g. decode's K and V projections of a small model) run on the calling
/// thread: a few microseconds of work, less than waking the pool.
const SERIAL_MUL_MAT_BELOW: usize = 1 << 17;

/// How the cpu backend rounds what it multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// ggml's cpu numerics (the default): activations are quantized once per
    /// column to the weight type's `vec_dot_type` (Q8_0, Q8_1 or Q8_K) and
    /// multiplied with integer dots; F16/BF16 weights see activations
    /// rounded to their type; attention over an F16 cache rounds Q and the
    /// softmax weights to f16. This is what llama.cpp computes, so logits and
    /// greedy tokens follow it closely — and integer dots are the fast path.
    #[default]
    Ggml,
    /// Every product in f32 against dequantized weights: what the WGSL
    /// kernels compute, so it is the oracle they are tested against.
    F32,
}

/// The cpu backend: a rayon pool and the byte counters of what it holds.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    precision: Precision,
    weights_bytes: Arc<AtomicUsize>,
    kv_bytes: Arc<AtomicUsize>,
    scratch_bytes: Arc<AtomicUsize>,
}

impl CpuBackend {
    /// A backend with its own pool of `n_threads` (default: one per core)
    /// and ggml's numerics ([`Precision::Ggml`]).
    pub fn new(n_threads: Option<usize>) -> Result<Self> {
        Self::with_precision(n_threads, Precision::Ggml)
    }

    /// A backend with the given numerics.
    pub fn with_precision(n_threads: Option<usize>, precision: Precision) -> Result<Self> {
        qdot::tier_cap().map_err(BackendError::Device)?;
        let mut b = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("glint-cpu-{i}"));
        if let Some(n) = n_threads {
            b = b.num_threads(n);
        }
        let pool = b
            .build()
            .map_err(|e| BackendError::Device(format!("cpu thread pool: {e}")))?;
        Ok(CpuBackend {
            pool,
            precision,
            weights_bytes: Arc::default(),
            kv_bytes: Arc::default(),
            scratch_bytes: Arc::default(),
        })
    }

    /// The numerics in use.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// `f(par)`: on the pool with `par = true` when `n_elements` is enough
    /// work to share, else on the calling thread with `par = false` (waking
    /// the pool for a decode-sized vector costs more than the op).
    fn run<R: Send>(&self, n_elements: usize, f: impl FnOnce(bool) -> R + Send) -> R {
        if n_elements < SERIAL_BELOW {
            f(false)
        } else {
            self.pool.install(|| f(true))
        }
    }

    /// Threads in the pool.
    pub fn n_threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

thread_local! {
    /// This worker runs an [`CpuBackend::enter`]'s `f`, or spins for one.
    static ENTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets [`ENTERED`] for its lifetime (then puts back what it was), and
/// `stop` (when given) as it ends, panic or not.
struct Entered<'a> {
    was: bool,
    stop: Option<&'a AtomicBool>,
}

impl<'a> Entered<'a> {
    fn new(stop: Option<&'a AtomicBool>) -> Self {
        Entered {
            was: ENTERED.with(|e| e.replace(true)),
            stop,
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop {
            stop.store(true, Ordering::Release);
        }
        ENTERED.with(|e| e.set(self.was));
    }
}

/// A spinner gives up after this long without work: see [`spin_while`].
const SPIN_IDLE_MAX: std::time::Duration = std::time::Duration::from_millis(2);

/// `f()` on this worker while every other worker of the current pool
/// spins for work until it returns (or unwinds). A worker already in an
/// `enter` (running one's `f`, or spinning for one) takes no part: a
/// nested or concurrent `enter` runs plainly, and a spinner is never
/// stacked on a thread whose `f` it would then wait for — two forward
/// passes on one pool cannot each hold the other's worker.
///
/// A spinner can still land on top of `f`'s own work: a worker that stole
/// a task of `f`'s and waits in that task's join runs whatever else is
/// pending, its broadcast spinner included, and the task cannot return
/// (nor `f`, waiting on it) until the spinner does. So a spinner returns
/// after [`SPIN_IDLE_MAX`] without work as well as when `f` does: a stall
/// of 2 ms where it used to hang (`tests/enter.rs`, about one run in 150
/// of its three cases together on 2 cores), longer than a decode step's
/// serial stretches, which the spinning is for.
fn spin_while<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if ENTERED.with(|e| e.get()) || rayon::current_num_threads() < 2 {
        let _entered = Entered::new(None);
        return f();
    }
    let stop = AtomicBool::new(false);
    rayon::scope(|s| {
        s.spawn_broadcast(|_, _| {
            if ENTERED.with(|e| e.get()) {
                return; // the owner, or a worker busy with another enter
            }
            let _entered = Entered::new(None);
            let mut idle_since: Option<std::time::Instant> = None;
            while !stop.load(Ordering::Acquire) {
                if rayon::yield_now() == Some(rayon::Yield::Executed) {
                    idle_since = None;
                    continue;
                }
                if idle_since
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed()
                    > SPIN_IDLE_MAX
                {
                    break;
                }
                // Give the core up to whatever else is runnable: with more
                // workers than cores, a busy loop here starved the thread
                // running `f` (SmolLM2 tg32 with 4 threads on 2 cores: 212
                // -> 4 t/s).
                std::thread::yield_now();
            }
        });
        // Dropped as `f` returns or unwinds: the spinners stop, and the
        // scope's wait for them ends.
        let _entered = Entered::new(Some(&stop));
        f()
    })
}

fn shape_err(op: &'static str, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

/// The desc's byte size, or an error naming why it has none.
fn checked_bytes(op: &'static str, d: &TensorDesc) -> Result<usize> {
    let row = d.ty.bytes_for(d.ne[0] as u64).ok_or_else(|| {
        shape_err(
            op,
            format!(
                "`{}`: ne[0] = {} is not a whole number of {} blocks of {}",
                d.label,
                d.ne[0],
                d.ty,
                d.ty.block_size()
            ),
        )
    })?;
    d.ne[1..]
        .iter()
        .try_fold(row, |acc, &n| acc.checked_mul(n as u64))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| shape_err(op, format!("`{}`: ne {:?} overflows", d.label, d.ne)))
}

fn check_range(op: &'static str, t: &CpuTensor, offset: usize, len: usize) -> Result<()> {
    let size = t.desc.n_bytes();
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(BackendError::Range {
            op,
            label: t.desc.label.to_string(),
            start: offset,
            end: offset.saturating_add(len),
            size,
        }),
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;

    fn name(&self) -> String {
        match qdot::tier_cap() {
            Ok(qdot::Tier::Native) | Err(_) => format!("cpu ({} threads)", self.n_threads()),
            Ok(tier) => format!("cpu ({} threads, {tier:?} tier)", self.n_threads()),
        }
    }

    fn alloc(&self, desc: TensorDesc) -> Result<CpuTensor> {
        checked_bytes("alloc", &desc)?;
        let counter = match desc.usage {
            Usage::Weights => &self.weights_bytes,
            Usage::KvCache => &self.kv_bytes,
            Usage::Scratch => &self.scratch_bytes,
        };
        Ok(CpuTensor::owned(desc, counter.clone()))
    }

    fn weight(&self, desc: TensorDesc, bytes: SharedBytes) -> Result<CpuTensor> {
        let n = checked_bytes("weight", &desc)?;
        if bytes.bytes().len() != n {
            return Err(shape_err(
                "weight",
                format!(
                    "`{}` ({} {:?}) needs {n} bytes, got {}",
                    desc.label,
                    desc.ty,
                    desc.ne,
                    bytes.bytes().len()
                ),
            ));
        }
        Ok(CpuTensor::shared(desc, bytes))
    }

    fn view(&self, t: &CpuTensor, ne: [usize; 4]) -> Result<CpuTensor> {
        t.view(ne)
    }

    fn write(&self, t: &CpuTensor, offset: usize, data: &[u8]) -> Result<()> {
        check_range("write", t, offset, data.len())?;
        let mut g = t.write_guard("write")?;
        g.bytes_mut()[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read(&self, t: &CpuTensor, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range("read", t, offset, out.len())?;
        let g = t.read_guard()?;
        out.copy_from_slice(&g.bytes()[offset..offset + out.len()]);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// The ops ran when they were called: the bytes are read now.
    type Reading = Vec<u8>;

    fn read_start(&self, t: &CpuTensor, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(t, offset, &mut v)?;
        Ok(v)
    }

    fn read_finish(&self, r: Vec<u8>, out: &mut [u8]) -> Result<()> {
        if r.len() != out.len() {
            return Err(BackendError::Shape {
                op: "read_finish",
                detail: format!("{} bytes were read, {} asked for", r.len(), out.len()),
            });
        }
        out.copy_from_slice(&r);
        Ok(())
    }

    /// `f` on one of the pool's workers, the others kept awake for it:
    /// each spins on [`rayon::yield_now`] (running whatever work `f`'s ops
    /// share out) until `f` returns. A worker with nothing to do sleeps
    /// after a few dozen idle rounds, and a decode step's serial stretches
    /// (norms, rope, one-token attention) are longer than that, so without
    /// this the next matvec's first tasks waited on a wake-up: Gemma 3's
    /// output projections, 0.50 -> 0.37 ms a token. The spinning lasts one
    /// forward pass, or 2 ms without work; see [`spin_while`] for why it
    /// cannot deadlock.
    fn enter<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(|| spin_while(f))
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            weights: self.weights_bytes.load(Ordering::Relaxed),
            kv_cache: self.kv_bytes.load(Ordering::Relaxed),
            scratch: self.scratch_bytes.load(Ordering::Relaxed),
            thread_scratch: matmul::thread_scratch_bytes(),
        }
    }

    fn mul_mat(&self, w: &CpuTensor, x: &CpuTensor, out: &CpuTensor) -> Result<()> {
        const OP: &str = "mul_mat";
        let m = check::mul_mat(w, x, out)?;
        let (k, n) = (w.desc.ne[0], w.desc.n_rows());
        let (wg, xg) = (w.read_guard()?, x.read_guard()?);
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let xs = xg.f32s();
        let ggml = self.precision == Precision::Ggml;
        let ty = w.desc.ty;
        let wr = WeightRows {
            ty,
            bytes: wg.bytes(),
            row_bytes: w.desc.row_bytes(),
            k,
            n,
        };
        let int_dot = matches!(
            ty.vec_dot_type(),
            GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K
        );
        if ggml && int_dot && k * n * m < SERIAL_MUL_MAT_BELOW {
            let fast = matmul::Kernels::Fast;
            return matmul::mul_mat_ggml_par(false, fast, wr, &xs, m, o);
        }
        self.pool.install(|| {
            if ggml {
                matmul::mul_mat_ggml(wr, &xs, m, o)
            } else {
                matmul::mul_mat(wr, &xs, m, o)
            }
        })
    }

    fn mul_mats(&self, ws: &[&CpuTensor], x: &CpuTensor, outs: &[&CpuTensor]) -> Result<()> {
        const OP: &str = "mul_mats";
        if ws.len() != outs.len() {
            return Err(shape_err(
                OP,
                format!("{} weights for {} outputs", ws.len(), outs.len()),
            ));
        }
        let mut m = 0;
        for (w, out) in ws.iter().zip(outs) {
            m = check::mul_mat(*w, x, *out)?;
        }
        // One decode column, ggml's numerics, work worth the pool: one job.
        let work: usize = ws.iter().map(|w| w.desc.ne[0] * w.desc.n_rows()).sum();
        let one_job = m == 1
            && self.precision == Precision::Ggml
            && ws.len() > 1
            && work >= SERIAL_MUL_MAT_BELOW;
        if one_job {
            let wgs = ws
                .iter()
                .map(|w| w.read_guard())
                .collect::<Result<Vec<_>>>()?;
            let xg = x.read_guard()?;
            let mut ogs = outs
                .iter()
                .map(|o| o.write_guard(OP))
                .collect::<Result<Vec<_>>>()?;
            let wrs: Vec<WeightRows> = ws
                .iter()
                .zip(&wgs)
                .map(|(w, g)| WeightRows {
                    ty: w.desc.ty,
                    bytes: g.bytes(),
                    row_bytes: w.desc.row_bytes(),
                    k: w.desc.ne[0],
                    n: w.desc.n_rows(),
                })
                .collect();
            let xs = xg.f32s();
            let mut os: Vec<&mut [f32]> = ogs.iter_mut().map(|g| g.f32s_mut()).collect();
            if self
                .pool
                .install(|| matmul::mul_mats_decode(true, &wrs, &xs, &mut os))?
            {
                return Ok(());
            }
        }
        for (w, out) in ws.iter().zip(outs) {
            self.mul_mat(w, x, out)?;
        }
        Ok(())
    }

    fn get_rows(&self, table: &CpuTensor, ids: &CpuTensor, out: &CpuTensor) -> Result<()> {
        const OP: &str = "get_rows";
        check::get_rows(table, ids, out)?;
        let (k, n_rows) = (table.desc.ne[0], table.desc.n_rows());
        let (tg, ig) = (table.read_guard()?, ids.read_guard()?);
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let (tb, is) = (tg.bytes(), ig.i32s());
        let row_bytes = table.desc.row_bytes();
        let ty = table.desc.ty;
        self.run(o.len(), |par| {
            matmul::get_rows(par, ty, tb, row_bytes, n_rows, k, &is, o)
        })
    }

    fn rms_norm(
        &self,
        x: &CpuTensor,
        w: Option<&CpuTensor>,
        eps: f32,
        out: &CpuTensor,
    ) -> Result<()> {
        const OP: &str = "rms_norm";
        check::rms_norm(x, w, out)?;
        let n = x.desc.ne[0];
        let xg = x.read_guard()?;
        let wg = w.map(|w| w.read_guard()).transpose()?;
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let xs = xg.f32s();
        let ws = wg.as_ref().map(|g| g.f32s());
        self.run(o.len(), |par| {
            elementwise::rms_norm(par, &xs, ws.as_deref(), eps, n, o)
        });
        Ok(())
    }

    fn add(&self, a: &CpuTensor, b: &CpuTensor, out: &CpuTensor) -> Result<()> {
        check::add(a, b, out)?;
        self.binary("add", a, b, out, |x, y| x + y)
    }

    fn mul(&self, a: &CpuTensor, b: &CpuTensor, out: &CpuTensor) -> Result<()> {
        check::mul(a, b, out)?;
        self.binary("mul", a, b, out, |x, y| x * y)
    }

    fn scale(&self, x: &CpuTensor, s: f32, out: &CpuTensor) -> Result<()> {
        check::scale(x, out)?;
        self.map("scale", x, out, move |v| v * s)
    }

    fn unary(&self, op: Unary, x: &CpuTensor, out: &CpuTensor) -> Result<()> {
        let f = match self.precision {
            Precision::Ggml => elementwise::unary_fn_ggml(op),
            Precision::F32 => elementwise::unary_fn(op),
        };
        check::unary(x, out)?;
        self.map("unary", x, out, f)
    }

    fn glu(&self, op: Glu, gate: &CpuTensor, up: &CpuTensor, out: &CpuTensor) -> Result<()> {
        let act = match self.precision {
            Precision::Ggml => elementwise::glu_fn_ggml(op),
            Precision::F32 => elementwise::glu_fn(op),
        };
        check::glu(gate, up, out)?;
        if self.precision == Precision::Ggml && op == Glu::GeGlu {
            let (gg, ug) = (gate.read_guard()?, up.read_guard()?);
            let mut og = out.write_guard("glu")?;
            let o = og.f32s_mut();
            let (g, u) = (gg.f32s(), ug.f32s());
            self.run(o.len(), |par| elementwise::geglu_ggml(par, &g, &u, o));
            return Ok(());
        }
        self.binary("glu", gate, up, out, move |g, u| act(g) * u)
    }

    fn softmax(&self, x: &CpuTensor, out: &CpuTensor) -> Result<()> {
        const OP: &str = "softmax";
        check::softmax(x, out)?;
        let xg = x.read_guard()?;
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let xs = xg.f32s();
        let n = x.desc.ne[0];
        self.run(o.len(), |par| elementwise::softmax(par, &xs, n, o));
        Ok(())
    }

    fn argmax(&self, x: &CpuTensor, out: &CpuTensor) -> Result<()> {
        const OP: &str = "argmax";
        check::argmax(x, out)?;
        let xg = x.read_guard()?;
        let mut og = out.write_guard(OP)?;
        let xs = xg.f32s();
        let n = x.desc.ne[0];
        let o: &mut [i32] = bytemuck::cast_slice_mut(og.bytes_mut());
        self.run(xs.len(), |par| elementwise::argmax(par, &xs, n, o));
        Ok(())
    }

    fn top_k(&self, x: &CpuTensor, k: usize, out: &CpuTensor) -> Result<()> {
        const OP: &str = "top_k";
        let cap = check::top_k(x, k, out)?;
        let xg = x.read_guard()?;
        let mut og = out.write_guard(OP)?;
        let xs = xg.f32s();
        let n = x.desc.ne[0];
        let o: &mut [i32] = bytemuck::cast_slice_mut(og.bytes_mut());
        self.run(xs.len(), |par| elementwise::top_k(par, &xs, n, k, cap, o));
        Ok(())
    }

    fn kq_mask(
        &self,
        cells: &CpuTensor,
        pos: &CpuTensor,
        seqs: &CpuTensor,
        p: &KqMask,
        out: &CpuTensor,
    ) -> Result<()> {
        const OP: &str = "kq_mask";
        let (n_kv, _) = check::kq_mask(cells, pos, seqs, p, out)?;
        let (cg, pg, sg) = (cells.read_guard()?, pos.read_guard()?, seqs.read_guard()?);
        let mut og = out.write_guard(OP)?;
        let (cs, ps, ss) = (cg.i32s(), pg.i32s(), sg.i32s());
        let w = cells.desc.ne[0];
        let cs = &cs[p.first_row * w..(p.first_row + n_kv) * w];
        let o = og.f32s_mut();
        if n_kv == 0 {
            return Ok(());
        }
        self.run(o.len(), |par| {
            elementwise::rows(par, o, n_kv, |t, row| {
                for (m, cell) in row.iter_mut().zip(cs.chunks_exact(w)) {
                    *m = p.value(cell, ps[t], ss[t]);
                }
            })
        });
        Ok(())
    }

    fn rope(&self, x: &CpuTensor, pos: &CpuTensor, p: &RopeParams, out: &CpuTensor) -> Result<()> {
        const OP: &str = "rope";
        check::rope(x, pos, p, out)?;
        let (xg, pg) = (x.read_guard()?, pos.read_guard()?);
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let (xs, ps) = (xg.f32s(), pg.i32s());
        self.run(o.len(), |par| rope::rope(par, &xs, &ps, p, o));
        Ok(())
    }

    fn set_rows(&self, src: &CpuTensor, idx: &CpuTensor, dst: &CpuTensor) -> Result<()> {
        const OP: &str = "set_rows";
        check::set_rows(src, idx, dst)?;
        let n = dst.desc.ne[0];
        let (sg, ig) = (src.read_guard()?, idx.read_guard()?);
        let mut dg = dst.write_guard(OP)?;
        let (ss, is) = (sg.f32s(), ig.i32s());
        match dst.desc.ty {
            F16 => elementwise::set_rows_f16(&ss, &is, n, dg.f16s_mut()),
            GgmlType::F32 => elementwise::set_rows_f32(&ss, &is, n, dg.f32s_mut()),
            ty => {
                // Q8_0, Q4_0: each row quantized as ggml's cpu backend does.
                let rb = dst.desc.row_bytes();
                let bytes = dg.bytes_mut();
                let n_rows = dst.desc.n_rows();
                for (i, &id) in is.iter().enumerate() {
                    let Some(r) = usize::try_from(id).ok().filter(|&r| r < n_rows) else {
                        continue;
                    };
                    act::quantize_row(
                        ty,
                        &ss[i * n..(i + 1) * n],
                        &mut bytes[r * rb..(r + 1) * rb],
                    )
                    .map_err(|e| shape_err(OP, e.to_string()))?;
                }
            }
        }
        Ok(())
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        mask: &CpuTensor,
        p: &AttnParams,
        out: &CpuTensor,
    ) -> Result<()> {
        const OP: &str = "attention";
        check::attention([q, k, v, mask], p, out)?;
        let (qg, kg, vg, mg) = (
            q.read_guard()?,
            k.read_guard()?,
            v.read_guard()?,
            mask.read_guard()?,
        );
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let (qs, ms) = (qg.f32s(), mg.f32s());
        let kw = self.window_rows(OP, k, &kg, p)?;
        let vw = self.window_rows(OP, v, &vg, p)?;
        let (kc, vc) = (kw.cache(), vw.cache());
        let p = &AttnParams { kv_start: 0, ..*p };
        // Work: one dot and one axpy of head_dim per (token, head, cache row).
        let work = o.len() * p.n_kv * 2;
        let ggml = self.precision == Precision::Ggml;
        self.run(work / 16, |par| {
            attention_with(Kernels::Fast, par, &qs, kc, vc, &ms, p, o, ggml)
        });
        Ok(())
    }

    fn attention_window(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        mask: &CpuTensor,
        [q2, k2, mask_far]: [&CpuTensor; 3],
        p: &AttnParams,
        out: &CpuTensor,
    ) -> Result<()> {
        const OP: &str = "attention_window";
        check::attention_window([q, k, v, mask], [q2, k2, mask_far], p, out)?;
        let (qg, kg, vg, mg) = (
            q.read_guard()?,
            k.read_guard()?,
            v.read_guard()?,
            mask.read_guard()?,
        );
        let (q2g, k2g, mfg) = (q2.read_guard()?, k2.read_guard()?, mask_far.read_guard()?);
        let mut og = out.write_guard(OP)?;
        let o = og.f32s_mut();
        let (qs, ms, q2s, mfs) = (qg.f32s(), mg.f32s(), q2g.f32s(), mfg.f32s());
        let kw = self.window_rows(OP, k, &kg, p)?;
        let vw = self.window_rows(OP, v, &vg, p)?;
        let k2w = self.window_rows(OP, k2, &k2g, p)?;
        let (kc, vc) = (kw.cache(), vw.cache());
        let far = Far {
            q: &q2s,
            k: k2w.cache(),
            mask: &mfs,
        };
        let p = &AttnParams { kv_start: 0, ..*p };
        let work = o.len() * p.n_kv * 2;
        let ggml = self.precision == Precision::Ggml;
        self.run(work / 16, |par| {
            attention_window(par, &qs, kc, vc, &ms, far, p, o, ggml)
        });
        Ok(())
    }

    fn kshift(&self, k: &CpuTensor, shift: &CpuTensor, p: &RopeParams) -> Result<()> {
        const OP: &str = "kshift";
        check::kshift(k, shift, p)?;
        let sg = shift.read_guard()?;
        let mut kg = k.write_guard(OP)?;
        let ss = sg.i32s();
        match k.desc.ty {
            F16 => {
                let kk = kg.f16s_mut();
                self.pool.install(|| rope::kshift(kk, &ss, p))
            }
            GgmlType::F32 => {
                let kk = kg.f32s_mut();
                self.pool.install(|| rope::kshift(kk, &ss, p))
            }
            ty => {
                let kk = kg.bytes_mut();
                self.pool
                    .install(|| rope::kshift_quant(ty, kk, &ss, p))
                    .map_err(|e| shape_err(OP, e.to_string()))?
            }
        }
        Ok(())
    }

    fn short_conv(
        &self,
        x: &CpuTensor,
        kernel: &CpuTensor,
        state: &CpuTensor,
        slots: &CpuTensor,
        out: &CpuTensor,
    ) -> Result<()> {
        const OP: &str = "short_conv";
        let (n, _, l, _) = check::short_conv([x, kernel, state, slots], out)?;
        let (xg, kg, sg) = (x.read_guard()?, kernel.read_guard()?, slots.read_guard()?);
        let mut stg = state.write_guard(OP)?;
        let mut og = out.write_guard(OP)?;
        // Sequential over tokens (a sequence's tokens read the state its
        // earlier ones leave); a few multiply-adds per channel.
        conv::short_conv(
            &xg.f32s(),
            &kg.f32s(),
            stg.f32s_mut(),
            &sg.i32s(),
            [n, l],
            og.f32s_mut(),
        );
        Ok(())
    }
}

/// The rows `kv_start .. kv_start + n_kv` of a cache operand, as the
/// attention kernels read them (F16 or F32, from row 0 of the window).
enum WindowRows<'a> {
    F16(std::borrow::Cow<'a, [half::f16]>, usize),
    F32(std::borrow::Cow<'a, [f32]>, usize),
}

impl WindowRows<'_> {
    fn cache(&self) -> Cache<'_> {
        match self {
            WindowRows::F16(c, from) => Cache::F16(&c[*from..]),
            WindowRows::F32(c, from) => Cache::F32(&c[*from..]),
        }
    }
}

impl CpuBackend {
    /// A cache operand's attended rows: F16 and F32 ones borrowed in place,
    /// a quantized one (Q8_0, Q4_0) dequantized to f32, row by row. The
    /// kernels then read the stored values exactly, with no rounding of Q
    /// to the cache's type.
    fn window_rows<'a>(
        &self,
        op: &'static str,
        t: &CpuTensor,
        g: &'a tensor::ReadGuard<'_>,
        p: &AttnParams,
    ) -> Result<WindowRows<'a>> {
        let row = t.desc.ne[0];
        let from = p.kv_start * row;
        Ok(match t.desc.ty {
            F16 => WindowRows::F16(g.f16s(), from),
            GgmlType::F32 => WindowRows::F32(g.f32s(), from),
            ty => {
                let rb = t.desc.row_bytes();
                let src = &g.bytes()[p.kv_start * rb..(p.kv_start + p.n_kv) * rb];
                let mut out = vec![0f32; p.n_kv * row];
                self.run(out.len(), |par| {
                    let one = |(dst, s): (&mut [f32], &[u8])| {
                        glint_quant::dequantize_row(ty, s, dst)
                            .map_err(|e| shape_err(op, e.to_string()))
                    };
                    if par {
                        use rayon::prelude::*;
                        out.par_chunks_mut(row)
                            .zip(src.par_chunks(rb))
                            .try_for_each(one)
                    } else {
                        out.chunks_mut(row).zip(src.chunks(rb)).try_for_each(one)
                    }
                })?;
                WindowRows::F32(std::borrow::Cow::Owned(out), 0)
            }
        })
    }
}

impl CpuBackend {
    /// `out = f(a, b)` with `b` the same shape as `a` or one row broadcast
    /// (checked by the caller).
    fn binary(
        &self,
        op: &'static str,
        a: &CpuTensor,
        b: &CpuTensor,
        out: &CpuTensor,
        f: impl Fn(f32, f32) -> f32 + Send + Sync,
    ) -> Result<()> {
        let n = a.desc.ne[0];
        let (ag, bg) = (a.read_guard()?, b.read_guard()?);
        let mut og = out.write_guard(op)?;
        let o = og.f32s_mut();
        let (xs, ys) = (ag.f32s(), bg.f32s());
        self.run(o.len(), |par| elementwise::binary(par, &xs, &ys, n, o, f));
        Ok(())
    }

    /// `out = f(x)`, same shapes (checked by the caller).
    fn map(
        &self,
        op: &'static str,
        x: &CpuTensor,
        out: &CpuTensor,
        f: impl Fn(f32) -> f32 + Send + Sync,
    ) -> Result<()> {
        let xg = x.read_guard()?;
        let mut og = out.write_guard(op)?;
        let o = og.f32s_mut();
        let xs = xg.f32s();
        self.run(o.len(), |par| elementwise::map(par, &xs, o, f));
        Ok(())
    }
}
