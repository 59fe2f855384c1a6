//! Prefill products on Intel AMX: the 32-element block types (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0) and the K-quants Q4_K, Q5_K, Q6_K against their Q8
//! activations, one tile product per block (per sub-block of a K-quant).
//!
//! A tile product (`tdpbssd`) multiplies [`TOKENS`] activation rows of one
//! block (A: 16 rows × 32 (or 16) signed levels, read straight from the
//! quantized activations) with [`ROWS`] weight rows of the same block (B:
//! their signed levels in AMX's "VNNI" layout, unpacked once per band of
//! rows) into 16 × 16 exact i32 sums.
//!
//! - 32-element blocks: each sum is the `sumi` of ggml's loop, scaled and
//!   added in f32 exactly as `glint_quant::vec_dot` adds a block's term
//!   ([`Order`]), blocks in order, from 0.0: the same operations on the
//!   same numbers, so the same bits as the reference loops (the tests hold
//!   them equal), where the vector kernels differ from them by rounding.
//! - K-quants: the sub-blocks' sums times their integer scales make the
//!   super-block's exact integer sum (ggml's eight lanes added), and the
//!   mins' term is exact too (`vpdpwssd` on the activations' `bsums`); each
//!   super-block then adds `(d * dy) * sum` and takes off
//!   `(dmin * dy) * mins`. ggml adds its eight lanes in f32, so these
//!   differ from the reference by rounding only (the tests' tolerance).
//!
//! | piece | what |
//! | --- | --- |
//! | [`available`] | cpuid AMX-TILE + AMX-INT8, the OS's XCR0 tile bits, and the kernel's permission (`arch_prctl`) |
//! | `Facts` | per type: block bytes, activation block, the tile's K, how a block's term is formed |
//! | `Band` | 16 weight rows unpacked: levels `[blocks][elems / 4][16][4]` i8; scales, mins, `d`, `m` per block |
//! | `Acts` | the activations as the tiles read them, and their scales (`dy`, `sy`, `bsums` pairs) per group of 16 |
//! | [`Unit`] | who forms the i32 tile: the AMX instructions, or [`Unit::Model`], the same sums in plain Rust (any cpu) |
//!
//! Work is split by bands of weight rows, each unpacked once and passed over
//! every group of 16 activation columns.

#![allow(unsafe_code)]

use crate::qdot::f16_at;
use glint_backend::GgmlType;
use glint_quant::kquants::get_scale_min_k4;
use glint_quant::QK_K;
use rayon::prelude::*;

/// Weight rows of one band: the columns of the tile product's B and C.
pub const ROWS: usize = 16;
/// Activation columns (tokens) of one group: the rows of A and C.
pub const TOKENS: usize = 16;

/// Who forms each block's `[TOKENS][ROWS]` i32 sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The AMX-INT8 instructions (only where [`available`]).
    Amx,
    /// The same exact sums in plain Rust, on any cpu: the AMX path's twin
    /// (for tests; slow).
    Model,
}

/// How a type's reference loop forms one block's term from its `sumi`
/// (f32 operations in this order, no fused multiply-add).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// `sumi * dx * dy` (Q4_0).
    SumiDx,
    /// `(dx * dy) * sumi` (Q5_0, Q8_0).
    DxDy,
    /// `(dx * dy) * sumi + mx * sy` (Q4_1, Q5_1, against Q8_1).
    DxDyMin,
    /// A K-quant super-block: `acc + (d * dy) * sum`, then (with `min`)
    /// `- (dmin * dy) * mins`.
    K { min: bool },
}

/// One type's facts for the tiles.
#[derive(Clone, Copy, Debug)]
struct Facts {
    /// Bytes of a weight block, and of an activation block (its
    /// `vec_dot_type`), where the activation levels start in it.
    x_size: usize,
    y_size: usize,
    y_at: usize,
    /// Elements of a block, and of one tile product (the tile's K: a
    /// K-quant's sub-block, 32 or 16).
    elems: usize,
    sub: usize,
    order: Order,
}

/// | type | block | activations | elements | tile K | term |
/// | --- | ---: | --- | ---: | ---: | --- |
/// | Q4_0 | 18 | Q8_0 (34) | 32 | 32 | `sumi * dx * dy` |
/// | Q4_1 | 20 | Q8_1 (36) | 32 | 32 | `(dx * dy) * sumi + mx * sy` |
/// | Q5_0 | 22 | Q8_0 | 32 | 32 | `(dx * dy) * sumi` |
/// | Q5_1 | 24 | Q8_1 | 32 | 32 | `(dx * dy) * sumi + mx * sy` |
/// | Q8_0 | 34 | Q8_0 | 32 | 32 | `(dx * dy) * sumi` |
/// | Q4_K | 144 | Q8_K (292) | 256 | 32 | super-block, mins |
/// | Q5_K | 176 | Q8_K | 256 | 32 | super-block, mins |
/// | Q6_K | 210 | Q8_K | 256 | 16 | super-block |
fn facts(ty: GgmlType) -> Option<Facts> {
    use GgmlType as T;
    let (x_size, y_size, y_at, elems, sub, order) = match ty {
        T::Q4_0 => (18, 34, 2, 32, 32, Order::SumiDx),
        T::Q4_1 => (20, 36, 4, 32, 32, Order::DxDyMin),
        T::Q5_0 => (22, 34, 2, 32, 32, Order::DxDy),
        T::Q5_1 => (24, 36, 4, 32, 32, Order::DxDyMin),
        T::Q8_0 => (34, 34, 2, 32, 32, Order::DxDy),
        T::Q4_K => (144, 292, 4, QK_K, 32, Order::K { min: true }),
        T::Q5_K => (176, 292, 4, QK_K, 32, Order::K { min: true }),
        T::Q6_K => (210, 292, 4, QK_K, 16, Order::K { min: false }),
        _ => return None,
    };
    Some(Facts {
        x_size,
        y_size,
        y_at,
        elems,
        sub,
        order,
    })
}

/// Whether [`mul_mat`] takes weights of `ty`.
pub fn supports(ty: GgmlType) -> bool {
    facts(ty).is_some()
}

/// One weight block's unpacked form: its signed levels (what ggml's loop
/// multiplies), the K-quant's sub-block scales and mins, `d` and `m`
/// (a min for Q4_1/Q5_1, `dmin` for Q4_K/Q5_K, else 0).
struct Unpacked {
    levels: [i8; QK_K],
    scales: [i32; 16],
    mins: [i32; 8],
    d: f32,
    m: f32,
}

/// `xb` (one block of `ty`) into `u`.
fn unpack(ty: GgmlType, xb: &[u8], u: &mut Unpacked) {
    use GgmlType as T;
    let lv = &mut u.levels;
    match ty {
        T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 => {
            // (nibbles at, high bits at, bias, has min)
            let (qs_at, qh_at, bias, min) = match ty {
                T::Q4_0 => (2, None, 8i8, false),
                T::Q4_1 => (4, None, 0, true),
                T::Q5_0 => (6, Some(2), 16, false),
                _ => (8, Some(4), 0, true),
            };
            let qh = qh_at.map_or(0, |at| {
                u32::from_le_bytes([xb[at], xb[at + 1], xb[at + 2], xb[at + 3]])
            });
            let qs: &[u8; 16] = xb[qs_at..qs_at + 16].try_into().expect("16 bytes");
            for j in 0..16 {
                let h0 = (((qh >> j) & 1) << 4) as u8;
                let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
                lv[j] = ((qs[j] & 0x0f) | h0) as i8 - bias;
                lv[j + 16] = ((qs[j] >> 4) | h1) as i8 - bias;
            }
            (u.d, u.m) = (f16_at(xb, 0), if min { f16_at(xb, 2) } else { 0.0 });
        }
        T::Q8_0 => {
            for (o, &q) in lv.iter_mut().zip(&xb[2..34]) {
                *o = q as i8;
            }
            (u.d, u.m) = (f16_at(xb, 0), 0.0);
        }
        T::Q4_K | T::Q5_K => {
            // d, dmin: f16; scales: [u8; 12]; (Q5_K: qh: [u8; 32]); qs: [u8; 128]
            let scales: &[u8; 12] = xb[4..16].try_into().expect("12 bytes");
            let five = ty == T::Q5_K;
            let qs_at = if five { 48 } else { 16 };
            let qs: &[u8; 128] = xb[qs_at..qs_at + 128].try_into().expect("128 bytes");
            let qh: &[u8; 32] = xb[16..48].try_into().expect("32 bytes");
            for p in 0..4 {
                for l in 0..32 {
                    let q = qs[32 * p + l];
                    let (h0, h1) = if five {
                        (
                            ((qh[l] >> (2 * p)) & 1) << 4,
                            ((qh[l] >> (2 * p + 1)) & 1) << 4,
                        )
                    } else {
                        (0, 0)
                    };
                    lv[64 * p + l] = ((q & 0x0f) | h0) as i8;
                    lv[64 * p + 32 + l] = ((q >> 4) | h1) as i8;
                }
            }
            for j in 0..8 {
                let (sc, m) = get_scale_min_k4(j, scales);
                (u.scales[j], u.mins[j]) = (sc as i32, m as i32);
            }
            (u.d, u.m) = (f16_at(xb, 0), f16_at(xb, 2));
        }
        T::Q6_K => {
            // ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16
            let ql: &[u8; 128] = xb[..128].try_into().expect("128 bytes");
            let qh: &[u8; 64] = xb[128..192].try_into().expect("64 bytes");
            for n in 0..2 {
                for l in 0..32 {
                    let (a, b, h) = (ql[64 * n + l], ql[64 * n + 32 + l], qh[32 * n + l]);
                    let o = 128 * n + l;
                    lv[o] = ((a & 0x0f) | ((h & 3) << 4)) as i8 - 32;
                    lv[o + 32] = ((b & 0x0f) | (((h >> 2) & 3) << 4)) as i8 - 32;
                    lv[o + 64] = ((a >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32;
                    lv[o + 96] = ((b >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32;
                }
            }
            for (s, &b) in u.scales.iter_mut().zip(&xb[192..208]) {
                *s = b as i8 as i32;
            }
            (u.d, u.m) = (f16_at(xb, 208), 0.0);
        }
        _ => unreachable!("amx::unpack: {ty} has no facts"),
    }
}

/// [`ROWS`] weight rows (fewer at the end of a matrix: the rest zeros),
/// unpacked for the tiles.
struct Band {
    /// levels: `[nb][elems / 4][ROWS][4]` i8: element `e` of row `r` of
    /// block `b` at `b * elems * ROWS + (e / 4) * 64 + r * 4 + e % 4` (B's
    /// layout; a tile product takes `sub / 4` of the `elems / 4` rows).
    levels: Vec<i8>,
    /// scales: `[nb][elems / sub][ROWS]` i32 (K-quants; else empty).
    scales: Vec<i32>,
    /// minp: `[nb][4][ROWS]` i32, the mins of sub-blocks `2p`, `2p + 1`
    /// as the low and high i16 (Q4_K, Q5_K; else empty).
    minp: Vec<i32>,
    /// d, m: `[nb][ROWS]` f32.
    d: Vec<f32>,
    m: Vec<f32>,
}

impl Band {
    fn new(f: &Facts, nb: usize) -> Self {
        let k = matches!(f.order, Order::K { .. });
        let min = f.order == Order::K { min: true };
        Band {
            levels: vec![0; nb * f.elems * ROWS],
            scales: vec![0; if k { nb * (f.elems / f.sub) * ROWS } else { 0 }],
            minp: vec![0; if min { nb * 4 * ROWS } else { 0 }],
            d: vec![0.0; nb * ROWS],
            m: vec![0.0; nb * ROWS],
        }
    }

    /// Rows `rows` (`rows.len() / row_bytes` of them, at most [`ROWS`]).
    fn fill(&mut self, ty: GgmlType, f: &Facts, rows: &[u8], row_bytes: usize) {
        let nb = row_bytes / f.x_size;
        let nr = rows.len() / row_bytes;
        let n_sub = f.elems / f.sub;
        let mut u = Unpacked {
            levels: [0; QK_K],
            scales: [0; 16],
            mins: [0; 8],
            d: 0.0,
            m: 0.0,
        };
        for b in 0..nb {
            let blk = &mut self.levels[b * f.elems * ROWS..(b + 1) * f.elems * ROWS];
            for r in 0..ROWS {
                if r < nr {
                    let at = r * row_bytes + b * f.x_size;
                    unpack(ty, &rows[at..at + f.x_size], &mut u);
                } else {
                    (u.levels, u.scales, u.mins, u.d, u.m) = ([0; QK_K], [0; 16], [0; 8], 0.0, 0.0);
                }
                // Each 4 elements of the row to their 4 bytes of B's row e / 4.
                for (dst, four) in blk[r * 4..]
                    .chunks_mut(4 * ROWS)
                    .zip(u.levels[..f.elems].chunks_exact(4))
                {
                    dst[..4].copy_from_slice(four);
                }
                self.d[b * ROWS + r] = u.d;
                self.m[b * ROWS + r] = u.m;
                if !self.scales.is_empty() {
                    for j in 0..n_sub {
                        self.scales[(b * n_sub + j) * ROWS + r] = u.scales[j];
                    }
                }
                if !self.minp.is_empty() {
                    for p in 0..4 {
                        let pair =
                            (u.mins[2 * p] as u32 & 0xffff) | ((u.mins[2 * p + 1] as u32) << 16);
                        self.minp[(b * 4 + p) * ROWS + r] = pair as i32;
                    }
                }
            }
        }
    }
}

/// The activations of one product as the tiles read them.
struct Acts<'a> {
    /// act: `[m]` rows of `act_bytes` (quantized: Q8_0, Q8_1 or Q8_K
    /// blocks); tail: the last partial group's rows, zero-padded to
    /// [`TOKENS`].
    act: &'a [u8],
    tail: Vec<u8>,
    act_bytes: usize,
    m: usize,
    /// dy, sy: `[groups][nb][TOKENS]` f32, each column's block scale and
    /// (Q8_1) `s`; 0 on the padding.
    dy: Vec<f32>,
    sy: Vec<f32>,
    /// bp: `[groups][nb][TOKENS][4]` i32 (Q4_K, Q5_K): the sums of each
    /// 32-element sub-block's levels (two `bsums`), sub-blocks `2p` and
    /// `2p + 1` as the low and high i16 of pair `p`.
    bp: Vec<i32>,
}

impl<'a> Acts<'a> {
    fn new(f: &Facts, act: &'a [u8], act_bytes: usize, m: usize) -> Self {
        let nb = act_bytes / f.y_size;
        let groups = m.div_ceil(TOKENS);
        let full = m / TOKENS * TOKENS;
        let mut tail = vec![0u8; if full < m { TOKENS * act_bytes } else { 0 }];
        tail[..(m - full) * act_bytes].copy_from_slice(&act[full * act_bytes..m * act_bytes]);
        let mut dy = vec![0f32; groups * nb * TOKENS];
        let mut sy = vec![0f32; groups * nb * TOKENS];
        let pairs = f.order == Order::K { min: true };
        let mut bp = vec![0i32; if pairs { groups * nb * TOKENS * 4 } else { 0 }];
        for c in 0..m {
            let (g, j) = (c / TOKENS, c % TOKENS);
            for b in 0..nb {
                let at = c * act_bytes + b * f.y_size;
                let i = (g * nb + b) * TOKENS + j;
                let yb = &act[at..at + f.y_size];
                match f.order {
                    Order::K { .. } => {
                        // Q8_K: d: f32, qs: [i8; 256], bsums: [i16; 16]
                        dy[i] = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
                        if pairs {
                            let bs =
                                |k: usize| i16::from_le_bytes([yb[260 + 2 * k], yb[261 + 2 * k]]);
                            for p in 0..4 {
                                let lo = bs(4 * p) as i32 + bs(4 * p + 1) as i32;
                                let hi = bs(4 * p + 2) as i32 + bs(4 * p + 3) as i32;
                                bp[i * 4 + p] = ((lo as u32 & 0xffff) | ((hi as u32) << 16)) as i32;
                            }
                        }
                    }
                    Order::DxDyMin => (dy[i], sy[i]) = (f16_at(yb, 0), f16_at(yb, 2)),
                    _ => dy[i] = f16_at(yb, 0),
                }
            }
        }
        Acts {
            act,
            tail,
            act_bytes,
            m,
            dy,
            sy,
            bp,
        }
    }

    /// Group `g`'s [`TOKENS`] rows (`TOKENS * act_bytes` bytes).
    fn group(&self, g: usize) -> &[u8] {
        let at = g * TOKENS * self.act_bytes;
        if at + TOKENS * self.act_bytes <= self.m * self.act_bytes {
            &self.act[at..at + TOKENS * self.act_bytes]
        } else {
            &self.tail
        }
    }
}

/// `out[c * n + r] = w row r · act column c` for `n` rows of `ty` (a type
/// [`supports`] takes; `row_bytes` each, checked by the caller against
/// `act_bytes`) and `m` quantized activation columns, through `unit`;
/// bands of [`ROWS`] rows on the current rayon pool when `par`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mat(
    unit: Unit,
    par: bool,
    ty: GgmlType,
    w: &[u8],
    row_bytes: usize,
    n: usize,
    act: &[u8],
    act_bytes: usize,
    m: usize,
    out: &mut [f32],
) {
    let Some(f) = facts(ty) else {
        panic!("amx::mul_mat: no tile kernel for {ty}");
    };
    assert!(
        unit == Unit::Model || available(),
        "amx::mul_mat: no AMX on this cpu"
    );
    CALLS.with(|c| c.set(c.get() + 1));
    let nb = row_bytes / f.x_size;
    if nb == 0 {
        // k = 0: every dot is an empty sum.
        out[..n * m].fill(0.0);
        return;
    }
    assert_eq!(row_bytes, nb * f.x_size, "amx::mul_mat: weight rows");
    assert_eq!(act_bytes, nb * f.y_size, "amx::mul_mat: act rows");
    assert!(w.len() >= n * row_bytes && act.len() >= m * act_bytes && out.len() >= n * m);
    let acts = Acts::new(&f, act, act_bytes, m);
    let bands = n.div_ceil(ROWS);
    let threads = if par {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let per_task = bands.div_ceil(4 * threads).max(1);
    let dst = Dst(out.as_mut_ptr(), n, m);
    let run = |t: usize| {
        let mut band = Band::new(&f, nb);
        for bi in t * per_task..((t + 1) * per_task).min(bands) {
            let r0 = bi * ROWS;
            let nr = ROWS.min(n - r0);
            band.fill(ty, &f, &w[r0 * row_bytes..(r0 + nr) * row_bytes], row_bytes);
            let job = Job {
                f,
                band: &band,
                acts: &acts,
                nb,
                r0,
                nr,
                dst,
            };
            match unit {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: checked above: the cpu has AMX-INT8 and AVX-512
                // F/BW/VL/VNNI, and the kernel granted the tile state.
                Unit::Amx => unsafe { x86::pass(&job) },
                #[cfg(not(target_arch = "x86_64"))]
                Unit::Amx => unreachable!("no AMX off x86_64"),
                Unit::Model => pass_model(&job),
            }
        }
    };
    let tasks = bands.div_ceil(per_task);
    if par {
        (0..tasks).into_par_iter().for_each(run);
    } else {
        (0..tasks).for_each(run);
    }
}

thread_local! {
    /// Products [`mul_mat`] ran on this thread (its caller's), whatever
    /// the unit: see [`calls_on_this_thread`].
    static CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many products this thread has run through the AMX path (real or
/// modelled) so far: lets a test see that the path it means to check ran,
/// where its results alone could not tell (the 32-element types' equal the
/// reference loops' either way).
pub fn calls_on_this_thread() -> usize {
    CALLS.with(|c| c.get())
}

/// One band's pass over every group of columns.
struct Job<'a> {
    f: Facts,
    band: &'a Band,
    acts: &'a Acts<'a>,
    /// Blocks a row; the band's first row and its rows.
    nb: usize,
    r0: usize,
    nr: usize,
    dst: Dst,
}

/// The output `[m, n]` f32 (columns of `n`), written by bands: each band
/// task writes only its own rows `r0..r0 + nr` of every column.
#[derive(Clone, Copy)]
struct Dst(*mut f32, usize, usize);

// SAFETY: the tasks holding a `Dst` write disjoint elements (their own
// rows) of one buffer that outlives them (`mul_mat` waits for them all).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

impl Dst {
    /// Column `c`, rows `r0..r0 + v.len()` = `v`.
    fn put(self, c: usize, r0: usize, v: &[f32]) {
        let (n, m) = (self.1, self.2);
        assert!(c < m && r0 + v.len() <= n);
        // SAFETY: in bounds (checked above; the buffer holds `n * m`), and
        // no other task writes these rows (see `Dst`).
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), self.0.add(c * n + r0), v.len());
        }
    }
}

/// [`Unit::Model`]'s pass: the AMX pass's arithmetic element by element,
/// the tile products in plain Rust.
fn pass_model(job: &Job) {
    let Job {
        f,
        band,
        acts,
        nb,
        r0,
        nr,
        dst,
    } = *job;
    let n_sub = f.elems / f.sub;
    let mut c = [[0i32; ROWS]; TOKENS]; // c: `[TOKENS][ROWS]` i32, one tile product
    for g in 0..acts.m.div_ceil(TOKENS) {
        let rows = acts.group(g);
        let mut acc = [[0f32; ROWS]; TOKENS]; // acc: `[TOKENS][ROWS]` f32
        for b in 0..nb {
            let s = (g * nb + b) * TOKENS;
            let (dy, sy) = (&acts.dy[s..s + TOKENS], &acts.sy[s..s + TOKENS]);
            let (d, m) = (
                &band.d[b * ROWS..(b + 1) * ROWS],
                &band.m[b * ROWS..(b + 1) * ROWS],
            );
            // isum: the block's exact sums (K-quants: over its sub-blocks,
            // each times its scale).
            let mut isum = [[0i32; ROWS]; TOKENS];
            for j in 0..n_sub {
                let a = &rows[b * f.y_size + f.y_at + j * f.sub..];
                let lv = &band.levels[(b * f.elems + j * f.sub) * ROWS..];
                model_tile(f.sub, a, acts.act_bytes, lv, &mut c);
                let sc = |r: usize| match f.order {
                    Order::K { .. } => band.scales[(b * n_sub + j) * ROWS + r],
                    _ => 1,
                };
                for t in 0..TOKENS {
                    for r in 0..ROWS {
                        isum[t][r] += sc(r) * c[t][r];
                    }
                }
            }
            for t in 0..TOKENS {
                for r in 0..ROWS {
                    let v = isum[t][r] as f32;
                    acc[t][r] = match f.order {
                        Order::SumiDx => acc[t][r] + v * d[r] * dy[t],
                        Order::DxDy => acc[t][r] + (d[r] * dy[t]) * v,
                        Order::DxDyMin => acc[t][r] + ((d[r] * dy[t]) * v + m[r] * sy[t]),
                        Order::K { min } => {
                            let a = acc[t][r] + (d[r] * dy[t]) * v;
                            if min {
                                let bp = &acts.bp[(s + t) * 4..(s + t) * 4 + 4];
                                let mins: i32 = (0..4)
                                    .map(|p| {
                                        let mp = band.minp[(b * 4 + p) * ROWS + r];
                                        let lo = (mp as i16 as i32) * (bp[p] as i16 as i32);
                                        lo + (mp >> 16) * (bp[p] >> 16)
                                    })
                                    .sum();
                                a - (m[r] * dy[t]) * mins as f32
                            } else {
                                a
                            }
                        }
                    };
                }
            }
        }
        for (t, a) in acc.iter().enumerate().take(acts.m - g * TOKENS) {
            dst.put(g * TOKENS + t, r0, &a[..nr]);
        }
    }
}

/// [`Unit::Model`]'s tile product of K = `sub`: `c[t][r]` = the exact
/// `sum_k a[t * a_stride + k] * level(r, k)` (`lv`: B's layout, see
/// [`Band`]).
fn model_tile(sub: usize, a: &[u8], a_stride: usize, lv: &[i8], c: &mut [[i32; ROWS]; TOKENS]) {
    for (t, ct) in c.iter_mut().enumerate() {
        let at = &a[t * a_stride..t * a_stride + sub];
        for (r, v) in ct.iter_mut().enumerate() {
            *v = (0..sub)
                .map(|k| at[k] as i8 as i32 * lv[(k / 4) * (4 * ROWS) + r * 4 + k % 4] as i32)
                .sum();
        }
    }
}

/// Whether this cpu and OS run the AMX path: AMX-TILE and AMX-INT8 (cpuid),
/// AVX-512 F/BW/VL/VNNI (the vector steps), the OS enabling the tile state
/// in XCR0, and Linux granting this process the tile data (`arch_prctl`).
/// Detected once. The grant is for the whole process and enlarges its
/// signal frames: from then on Linux refuses a `sigaltstack` smaller than
/// the frame with the tile data (about 11 KiB; `MINSIGSTKSZ` of old is 2
/// KiB).
pub fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| crate::qdot::allows(crate::qdot::Tier::Native) && x86::detect())
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// See [`super::available`].
    #[cfg(target_os = "linux")]
    pub(super) fn detect() -> bool {
        // cpuid leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8; leaf 1: ECX bit 27 OSXSAVE.
        // SAFETY: cpuid exists on every x86_64 cpu (a safe fn from Rust
        // 1.94; the workspace builds from 1.89).
        #[allow(unused_unsafe)]
        let (l1, l7) = unsafe { (__cpuid(1), __cpuid_count(7, 0)) };
        let amx = (l7.edx >> 24) & 3 == 3;
        let osxsave = (l1.ecx >> 27) & 1 == 1;
        let avx512 = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni");
        if !(amx && osxsave && avx512) {
            return false;
        }
        // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tiles.
        // SAFETY: OSXSAVE is set, so xgetbv runs.
        let xcr0 = unsafe { xgetbv0() };
        if (xcr0 >> 17) & 3 != 3 {
            return false;
        }
        // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux (5.16+)
        // gives a process the tile data only on request; 0 means granted.
        let ret: i64;
        // SAFETY: a plain syscall with integer arguments; it touches no
        // memory of ours and clobbers rcx and r11 (declared).
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") 158i64 => ret,
                in("rdi") 0x1023i64,
                in("rsi") 18i64,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }

    #[target_feature(enable = "xsave")]
    #[cfg(target_os = "linux")]
    unsafe fn xgetbv0() -> u64 {
        // SAFETY: the caller checked OSXSAVE.
        unsafe { _xgetbv(0) }
    }

    /// The tile configuration for tile products of K = `sub` (32 or 16):
    /// palette 1; tmm0 A (TOKENS rows × `sub` bytes), tmm1 B (`sub / 4`
    /// rows × 64 bytes), tmm2 C (TOKENS rows × 64 bytes).
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    fn config(sub: usize) -> Config {
        let mut c = [0u8; 64];
        c[0] = 1; // palette
        let tiles: [(u16, u8); 3] = [
            (sub as u16, TOKENS as u8),
            (64, (sub / 4) as u8),
            (64, TOKENS as u8),
        ];
        for (t, (colsb, rows)) in tiles.into_iter().enumerate() {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = rows;
        }
        Config(c)
    }

    /// The first 16 floats of `v`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_ps(v: &[f32]) -> __m512 {
        assert!(v.len() >= 16);
        // SAFETY: 16 floats in bounds (asserted); loadu needs no alignment.
        unsafe { _mm512_loadu_ps(v.as_ptr()) }
    }

    /// The first 16 lanes of `v`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_epi32(v: &[i32]) -> __m512i {
        assert!(v.len() >= 16);
        // SAFETY: 64 bytes in bounds (asserted); loadu needs no alignment.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    }

    /// `out = x`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store_ps(out: &mut [f32; 16], x: __m512) {
        // SAFETY: 64 writable bytes; storeu needs no alignment.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), x) }
    }

    /// Tiles: the configuration for `sub` loaded on this thread while it
    /// lives (not `Send`: the configuration is the thread's);
    /// [`Tiles::product`] forms one block's sums.
    struct Tiles {
        sub: usize,
        _thread: std::marker::PhantomData<*const ()>,
    }

    impl Tiles {
        /// # Safety
        /// Only where [`super::available`] said yes.
        unsafe fn load(sub: usize) -> Tiles {
            let cfg = config(sub);
            // SAFETY: the cpu has AMX and the process the tile state (the
            // caller's promise); the configuration is valid for palette 1.
            unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
            Tiles {
                sub,
                _thread: std::marker::PhantomData,
            }
        }

        /// `c[t][r]` = the exact sums of the tile product of A (TOKENS rows
        /// of the configured K bytes, `a_stride` apart, from `a`) and B (the
        /// K / 4 rows of 64 bytes from `b`).
        #[inline(always)]
        fn product(
            &self,
            sub: usize,
            a: &[u8],
            a_stride: usize,
            b: &[i8],
            c: &mut [[i32; ROWS]; TOKENS],
        ) {
            // The tiles read as many bytes a row as the loaded configuration
            // says: `self.sub`.
            assert!(
                sub == self.sub,
                "tile product of K {sub} on tiles of K {}",
                self.sub
            );
            assert!(a.len() >= (TOKENS - 1) * a_stride + sub && b.len() >= sub * ROWS);
            // SAFETY: the configuration for `sub` is loaded on this thread
            // (`self`); the reads stay inside `a` and `b` (asserted), the
            // write inside `c`; the tile registers are no one else's.
            unsafe {
                asm!(
                    "tileloadd tmm0, [{a} + {sa} * 1]",
                    "tileloadd tmm1, [{b} + {sb} * 1]",
                    "tilezero tmm2",
                    "tdpbssd tmm2, tmm0, tmm1",
                    "tilestored [{c} + {sb} * 1], tmm2",
                    a = in(reg) a.as_ptr(),
                    sa = in(reg) a_stride,
                    b = in(reg) b.as_ptr(),
                    sb = in(reg) 64usize,
                    c = in(reg) c.as_mut_ptr(),
                    options(nostack),
                );
            }
        }
    }

    impl Drop for Tiles {
        fn drop(&mut self) {
            // SAFETY: releases the tile state this thread configured.
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        }
    }

    /// [`super::pass_model`] on the AMX unit. Each tile product is issued
    /// before the vector steps of the one before it (two C buffers), so
    /// the tiles' latency hides behind the vector work; the vector steps
    /// are the model's, element for element, on 16-lane vectors (one a
    /// column: its 16 rows).
    ///
    /// # Safety
    /// Only where [`super::available`] said yes.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn pass(job: &Job) {
        // SAFETY: the caller's promise.
        let tiles = unsafe { Tiles::load(job.f.sub) };
        match job.f.order {
            Order::SumiDx => pass_blocks::<0>(&tiles, job),
            Order::DxDy => pass_blocks::<1>(&tiles, job),
            Order::DxDyMin => pass_blocks::<2>(&tiles, job),
            Order::K { min } => match (job.f.sub, min) {
                (32, true) => pass_k::<32, true>(&tiles, job),
                (32, false) => pass_k::<32, false>(&tiles, job),
                (16, true) => pass_k::<16, true>(&tiles, job),
                (16, false) => pass_k::<16, false>(&tiles, job),
                (sub, _) => unreachable!("K-quant sub-blocks of {sub}: no tile pass"),
            },
        }
    }

    /// [`pass`] for the 32-element block types (`ORDER`: the index of
    /// their [`Order`]).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn pass_blocks<const ORDER: u8>(tiles: &Tiles, job: &Job) {
        let Job {
            f,
            band,
            acts,
            nb,
            r0,
            nr,
            dst,
        } = *job;
        // c: two blocks' sums, `[2][TOKENS][ROWS]` i32.
        let mut c = [[[0i32; ROWS]; TOKENS]; 2];
        for g in 0..acts.m.div_ceil(TOKENS) {
            let rows = acts.group(g);
            // acc: `[TOKENS]` × 16 lanes f32, column t's sums for the 16 rows.
            let mut acc = [_mm512_setzero_ps(); TOKENS];
            for b in 0..=nb {
                if b < nb {
                    let a = &rows[b * f.y_size + f.y_at..];
                    let lv = &band.levels[b * 32 * ROWS..];
                    tiles.product(32, a, acts.act_bytes, lv, &mut c[b % 2]);
                }
                if b == 0 {
                    continue;
                }
                // The vector steps of block b - 1.
                let p = b - 1;
                let cp = &c[p % 2];
                let d = load_ps(&band.d[p * ROWS..]);
                let m = load_ps(&band.m[p * ROWS..]);
                let s = (g * nb + p) * TOKENS;
                for t in 0..TOKENS {
                    let v = _mm512_cvtepi32_ps(load_epi32(&cp[t]));
                    let dy = _mm512_set1_ps(acts.dy[s + t]);
                    let term = match ORDER {
                        0 => _mm512_mul_ps(_mm512_mul_ps(v, d), dy),
                        1 => _mm512_mul_ps(_mm512_mul_ps(d, dy), v),
                        _ => {
                            let min = _mm512_mul_ps(m, _mm512_set1_ps(acts.sy[s + t]));
                            _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(d, dy), v), min)
                        }
                    };
                    acc[t] = _mm512_add_ps(acc[t], term);
                }
            }
            put(acts, g, r0, nr, dst, &acc);
        }
    }

    /// [`pass`] for the K-quants: `SUB`-element tile products (32 or 16),
    /// `MIN`: with the mins' term (Q4_K, Q5_K).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn pass_k<const SUB: usize, const MIN: bool>(tiles: &Tiles, job: &Job) {
        let Job {
            f,
            band,
            acts,
            nb,
            r0,
            nr,
            dst,
        } = *job;
        let n_sub = f.elems / SUB;
        let steps = nb * n_sub;
        // c: two sub-blocks' sums, `[2][TOKENS][ROWS]` i32.
        let mut c = [[[0i32; ROWS]; TOKENS]; 2];
        for g in 0..acts.m.div_ceil(TOKENS) {
            let rows = acts.group(g);
            // acc: `[TOKENS]` × 16 lanes f32, column t's sums for the 16
            // rows; isum: the same in i32, the current block's exact sum.
            let mut acc = [_mm512_setzero_ps(); TOKENS];
            let mut isum = [_mm512_setzero_si512(); TOKENS];
            // Step q: sub-block q % n_sub of block q / n_sub.
            for q in 0..=steps {
                if q < steps {
                    let (b, j) = (q / n_sub, q % n_sub);
                    let a = &rows[b * f.y_size + f.y_at + j * SUB..];
                    let lv = &band.levels[(b * f.elems + j * SUB) * ROWS..];
                    tiles.product(SUB, a, acts.act_bytes, lv, &mut c[q % 2]);
                }
                if q == 0 {
                    continue;
                }
                // The integer steps of step q - 1.
                let p = q - 1;
                let (b, j) = (p / n_sub, p % n_sub);
                let cp = &c[p % 2];
                let sc = load_epi32(&band.scales[(b * n_sub + j) * ROWS..]);
                for t in 0..TOKENS {
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sc, load_epi32(&cp[t])));
                }
                if j + 1 < n_sub {
                    continue;
                }
                // Block b is whole: its float steps.
                let d = load_ps(&band.d[b * ROWS..]);
                let m = load_ps(&band.m[b * ROWS..]);
                let s = (g * nb + b) * TOKENS;
                let minp: [__m512i; 4] = std::array::from_fn(|p| {
                    if MIN {
                        load_epi32(&band.minp[(b * 4 + p) * ROWS..])
                    } else {
                        _mm512_setzero_si512()
                    }
                });
                for t in 0..TOKENS {
                    let dy = _mm512_set1_ps(acts.dy[s + t]);
                    let v = _mm512_cvtepi32_ps(isum[t]);
                    let mut a = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(d, dy), v));
                    if MIN {
                        let bp = &acts.bp[(s + t) * 4..(s + t) * 4 + 4];
                        let mut mins = _mm512_setzero_si512();
                        for (mp, &y) in minp.iter().zip(bp) {
                            mins = _mm512_dpwssd_epi32(mins, *mp, _mm512_set1_epi32(y));
                        }
                        let dm = _mm512_mul_ps(m, dy);
                        a = _mm512_sub_ps(a, _mm512_mul_ps(dm, _mm512_cvtepi32_ps(mins)));
                    }
                    acc[t] = a;
                    isum[t] = _mm512_setzero_si512();
                }
            }
            put(acts, g, r0, nr, dst, &acc);
        }
    }

    /// Group `g`'s sums (`acc[t]`: column `g * TOKENS + t`, its 16 rows)
    /// into the output, the padding's columns left out.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn put(acts: &Acts, g: usize, r0: usize, nr: usize, dst: Dst, acc: &[__m512; TOKENS]) {
        let mut v = [0f32; ROWS]; // v: one column's 16 rows
        for (t, a) in acc.iter().enumerate().take(acts.m - g * TOKENS) {
            store_ps(&mut v, *a);
            dst.put(g * TOKENS + t, r0, &v[..nr]);
        }
    }
}
