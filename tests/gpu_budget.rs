//! The structure of one wgpu decode step, held to budgets (the GPU issue).
//! Timings on the software driver say nothing about a GPU; what the backend
//! asks of the device per token does, and it is deterministic. The budgets
//! are today's structure: each line lowers as the decode path is reshaped,
//! towards the targets beside it.

mod common;

use glint::{BackendKind, Model, ModelParams};

/// Heap allocations counted on the thread that runs a decode step (the
/// backend records, submits and reads back there): this test binary's
/// allocator is the system's with a per-thread count switched on around
/// the step.
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static COUNTING: Cell<bool> = const { Cell::new(false) };
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }

    pub struct Counting;

    fn note() {
        // try_with: never panic in the allocator (a thread being torn down).
        let _ = COUNTING.try_with(|on| {
            if on.get() {
                let _ = COUNT.try_with(|n| n.set(n.get() + 1));
            }
        });
    }

    // SAFETY: every call is forwarded to `System` unchanged; the count is
    // a thread-local `Cell` of a const initializer (no allocation, no drop).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            note();
            unsafe { System.alloc(l) }
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            note();
            unsafe { System.alloc_zeroed(l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            note();
            unsafe { System.realloc(p, l, new) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            unsafe { System.dealloc(p, l) }
        }
    }

    /// Allocations (and reallocations) `f` makes on this thread.
    pub fn count(f: &mut dyn FnMut()) -> u64 {
        COUNT.with(|n| n.set(0));
        COUNTING.with(|on| on.set(true));
        f();
        COUNTING.with(|on| on.set(false));
        COUNT.with(|n| n.get())
    }
}

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

/// Per decode step of one sequence, after two warm-up steps; a step of 4
/// sequences (one unified cache) is held to the same budgets, its readback
/// 4 times one sequence's and its dispatches the same as one's.
struct Budget {
    /// Kernels per layer, per model (the architectures differ: Gemma 3 has
    /// QK-norm and post-norms), plus a fixed number around the layers
    /// (target: 7 per layer, after fusion). SmolLM2: 17 per layer before
    /// `mul_mat_add` fused the residual adds into the output matvecs and
    /// packed weights let Q/K/V run as one matvec and gate/up/GLU as one,
    /// and `rope_store` rotated Q and K and stored K and V in one kernel
    /// (Gemma 3: 21; some of its layers' Q/K/V are of mixed types); 8
    /// (Gemma 3: 15) before `norm_mul_mats` folded the attention and FFN
    /// norms into the matvecs after them and `norm_add` added Gemma 3's
    /// residuals in its post-norms' pass; Gemma 3: 11 before `rope_store`
    /// took its QK-norm into its dispatch; 9 (169 a step) before Q/K/V of
    /// two types packed into one buffer (Q and K one matvec, V another,
    /// not three) and each post-norm was left pending for the next block's
    /// first matvec to add as it reads its input. Met: SmolLM2 6; Gemma 3
    /// 125 a step for 18 layers: 6 where Q/K/V share a type (QKV, rope_store,
    /// attention, output, gate/up, down), 7 where V's differs (half the
    /// layers), and the last post-norm added before the head.
    dispatches_per_layer: [(&'static str, u64); 2],
    /// Around the layers (the 6): the embedding gather (and Gemma
    /// 3's scale), the output norm (Gemma 3: and the last pending
    /// post-norm), the head's matvec, the greedy argmax, and the mask
    /// built from the cells (Gemma 3: two, its sliding-window layers'
    /// too). SmolLM2 185 = 30 x 6 + 5. Gemma 3 127 = 9 x 6 + 9 x 7 + 10:
    /// its tied 178 MB embedding is bound in two windows of lavapipe's 128
    /// MiB binding, so the gather and the head are two dispatches each
    /// here (one on an adapter whose binding holds it). The total is held
    /// to per-layer x layers + 6 (Gemma 3: 132, 5 over today's count).
    dispatches_fixed: u64,
    /// Compute passes (met: one, every kernel of the step in it).
    passes: u64,
    /// Command-buffer submits (met: 1; the issue allows 2).
    submits: u64,
    /// Buffers and bind groups created (met: 0 — the params arena, the
    /// bind-group cache, the persistent readback buffer).
    created: u64,
    /// Queue writes: the step's inputs (ids, pos, rows, each token's
    /// sequence, the cells that changed), nothing else (met). Each
    /// kernel's params are its dispatch's immediate data where the adapter
    /// has immediates (lavapipe does); the params arena's one write a step
    /// went with them: SmolLM2 5 -> 4 writes, 11804 -> 268 bytes; Gemma 3
    /// 6 -> 5, 8044 -> 524. Without immediates the arena's write comes
    /// back (6). The masks are built on the device from its copy of the
    /// cells since: SmolLM2 5 writes, 24 bytes (4 of each input, 8 of the
    /// new cell: its position and a word of sequence bits), Gemma 3 the
    /// same (its two masks uploaded were 512). wgpu stages each queue
    /// write in a buffer of its own, made and freed per write: the step's
    /// small writes are staged together since, their bytes one queue write
    /// at submit and copied out in the step's encoder (met: 1).
    queue_writes: u64,
    /// Bytes written per sequence of the step (met: 24). An uploaded
    /// mask would be 4 bytes a cell of the span (256 here).
    queue_write_bytes_per_seq: u64,
    /// Pipelines created after warm-up (met: 0).
    pipelines_created: u64,
    /// Bytes read back for a greedy token (met: 4, one i32).
    readback_bytes: u64,
    /// Modeled weight bytes read over the weight bytes of one forward
    /// pass, per model (met at one sequence: every matrix read once; the
    /// norm vectors are not counted, so a little under 1).
    weight_bytes_ratio: f64,
    /// Modeled K/V bytes read over those of the attended cells (met: 1,
    /// the issue allows 1.05). Each K/V row of the cells a token's mask lets
    /// through is read once per KV head, by the one workgroup that takes
    /// the head's group of query heads; the padded span's masked cells,
    /// other sequences' among them, are skipped. It was n_head / n_head_kv
    /// (SmolLM2 9/3, Gemma 3 4/1) while each query head's workgroup read
    /// its KV head's rows itself.
    kv_bytes_ratio: f64,
    /// Heap allocations on the stepping thread, per dispatch of the step.
    /// SmolLM2 1647 for 184 dispatches, Gemma 3 1752 for 205 (about 9 a
    /// dispatch) while pipeline keys held their flags and constants in
    /// `Vec`s and every launch collected its bindings into `Vec`s; 794 and
    /// 795 (4.3 and 3.9) with those inline; 318 for 184 and 306 for 169
    /// (1.7 and 1.8, in a release build; the test profile's debug
    /// assertions add ~50 a step inside wgpu: SmolLM2 x4 378, 2.05) with
    /// the bind-group key, the binding windows, the rope params and the
    /// tensor views' labels inline or shared too. Left, by
    /// their backtraces: one a dispatch in wgpu-core's encoding of the pass
    /// at `finish` (`drain_barriers`, 183 of SmolLM2's 318), the rest a
    /// fixed ~135 a step (the batch, the cache's cell search, wgpu's
    /// submit and staging). Target: none per dispatch, a fixed few per step.
    /// A chained step is held to it too (SmolLM2 319 for 185, Gemma 3 256
    /// for 127, as the plain step's 320 and 260).
    heap_allocations_per_dispatch: u64,
}

const BUDGET: Budget = Budget {
    dispatches_per_layer: [("smollm2", 6), ("gemma3", 7)],
    dispatches_fixed: 6,
    passes: 1,
    submits: 1,
    created: 0,
    queue_writes: 1,
    queue_write_bytes_per_seq: 24,
    pipelines_created: 0,
    readback_bytes: 4,
    weight_bytes_ratio: 1.0,
    kv_bytes_ratio: 1.0,
    heap_allocations_per_dispatch: 3,
};

/// The budgets every step is held to, whatever its number of sequences
/// `n_seq` (its readback scales with them), and its modeled reads over what
/// it must read (the bench's formula; the step is at position prompt + 2,
/// as in bench). `what` names the model and the step in failures.
fn check_step(what: &str, model: &Model, c: &glint::GpuCounters, n_seq: u32) {
    let b = &BUDGET;
    assert!(c.passes <= b.passes, "{what}: {c:?}");
    assert!(c.submits <= b.submits, "{what}: {c:?}");
    assert!(c.buffers_created <= b.created, "{what}: {c:?}");
    assert!(c.bind_groups_created <= b.created, "{what}: {c:?}");
    assert!(c.pipelines_created <= b.pipelines_created, "{what}: {c:?}");
    assert!(c.queue_writes <= b.queue_writes, "{what}: {c:?}");
    assert!(
        c.queue_write_bytes <= n_seq as u64 * b.queue_write_bytes_per_seq,
        "{what}: {c:?}"
    );
    assert!(
        c.readback_bytes <= n_seq as u64 * b.readback_bytes,
        "{what}: {c:?}"
    );
    let n_prompt = model
        .tokenizer()
        .encode("The capital of France is", true, true)
        .unwrap()
        .len() as u32;
    let f16 = glint::CacheType::F16;
    let (w, kv) = glint_cli::bench::step_bytes(model, n_prompt, n_seq, f16, f16);
    let w_ratio = c.weight_bytes_read as f64 / w;
    assert!(
        (0.99..=b.weight_bytes_ratio).contains(&w_ratio),
        "{what}: weights read {w_ratio:.4}x: {c:?}"
    );
    // Each token reads the K/V of the cells it attends once: the prompt +
    // 3 of its own sequence, in a span of 64 cells a sequence (gpu_step's
    // context), none of the others.
    let kv_ratio = c.kv_bytes_read as f64 / kv;
    assert!(
        (0.99..=b.kv_bytes_ratio).contains(&kv_ratio),
        "{what}: K/V read {kv_ratio:.4}x: {c:?}"
    );
}

/// The heap allocations a step of `c`'s dispatches is allowed.
fn b_heap(c: &glint::GpuCounters) -> u64 {
    BUDGET.heap_allocations_per_dispatch * c.dispatches
}

#[test]
fn one_decode_step_stays_within_the_budget() {
    for name in ["smollm2", "gemma3"] {
        let p = ModelParams {
            backend: BackendKind::Wgpu,
            ..Default::default()
        };
        let model = Model::load(common::model(name), &p).unwrap();
        assert!(
            model.backend_name().contains("Vulkan"),
            "{}",
            model.backend_name()
        );
        let mut allocs = 0;
        let c = common::gpu_step_in(&model, 2, 1, &mut |step| allocs = heap::count(step));
        let n_layer = model.hparams().n_layer as u64;
        eprintln!("{name}: {c:?}, {allocs} heap allocations");
        assert!(
            allocs <= b_heap(&c),
            "{name}: {allocs} heap allocations for {} dispatches",
            c.dispatches
        );
        let b = &BUDGET;
        assert!(c.dispatches > 0, "{name}: nothing dispatched: {c:?}");
        let per_layer = b
            .dispatches_per_layer
            .iter()
            .find(|(m, _)| *m == name)
            .map(|(_, d)| *d)
            .unwrap();
        assert!(
            c.dispatches <= per_layer * n_layer + b.dispatches_fixed,
            "{name}: {} dispatches for {n_layer} layers",
            c.dispatches
        );
        check_step(name, &model, &c, 1);
        // The counts are a property of the model and the code, not of the
        // run: a second step counts the same.
        assert_eq!(
            common::one_gpu_step(&model, 3).dispatches,
            c.dispatches,
            "{name}"
        );
        // Four sequences decoded in one step over the unified cache (bench
        // -npl 4): the same kernels, every matvec taking the 4 columns in
        // one pass over its rows, so the weights are read once, not 4
        // times; each sequence's greedy token read back together.
        let c4 = common::gpu_step_in(&model, 2, 4, &mut |step| allocs = heap::count(step));
        eprintln!("{name} x4: {c4:?}, {allocs} heap allocations");
        assert!(
            allocs <= b_heap(&c4),
            "{name} x4: {allocs} heap allocations for {} dispatches",
            c4.dispatches
        );
        assert_eq!(c4.dispatches, c.dispatches, "{name} x4: {c4:?}");
        assert_eq!(
            c4.readbacks, 1,
            "{name} x4: one read for the 4 tokens: {c4:?}"
        );
        check_step(&format!("{name} x4"), &model, &c4, 4);
        // Greedy decoding chained on the device (`decode_greedy`): the
        // same step, its token taken from the previous step's argmax on
        // the device (no upload), started with the read of its own token
        // (one submit), the previous token's read finished meanwhile.
        // Four sequences chained (`decode_greedy_seqs`) likewise: their
        // four tokens read in one read.
        for (n_seq, plain) in [(1, &c), (4, &c4)] {
            let what = format!("{name} chained x{n_seq}");
            let (cc, allocs) = chained_step(&model, n_seq);
            eprintln!("{what}: {cc:?}, {allocs} heap allocations");
            assert!(
                allocs <= b_heap(&cc),
                "{what}: {allocs} heap allocations for {} dispatches",
                cc.dispatches
            );
            assert_eq!(cc.dispatches, c.dispatches, "{what}: {cc:?}");
            assert_eq!(
                (cc.submits, cc.readbacks, cc.queue_writes),
                (1, 1, plain.queue_writes),
                "{what}: one submit, one read: {cc:?}"
            );
            assert_eq!(
                cc.queue_write_bytes,
                plain.queue_write_bytes - 4 * n_seq as u64,
                "{what}: no token written: {cc:?}"
            );
            assert_eq!(cc.readback_bytes, 4 * n_seq as u64, "{what}: {cc:?}");
            check_step(&what, &model, &cc, n_seq as u32);
        }
        // The int8 matvec (`--gpu-int8`): each matvec's workgroups quantize
        // x themselves, so no dispatch of its own: the same step, at one
        // sequence and at four.
        let p8 = ModelParams {
            gpu_int8: true,
            ..p.clone()
        };
        let m8 = Model::load(common::model(name), &p8).unwrap();
        assert!(
            m8.backend_name().contains("int8 matvec"),
            "{}",
            m8.backend_name()
        );
        for n_seq in [1, 4] {
            let what = format!("{name} int8 x{n_seq}");
            let c8 = common::gpu_step_in(&m8, 2, n_seq, &mut |step| allocs = heap::count(step));
            eprintln!("{what}: {c8:?}, {allocs} heap allocations");
            assert!(allocs <= b_heap(&c8), "{what}: {allocs} heap allocations");
            assert_eq!(c8.dispatches, c.dispatches, "{what}: {c8:?}");
            check_step(&what, &m8, &c8, n_seq as u32);
        }
        // Tuned at load (`--gpu-tune on`; off on lavapipe by default): the
        // rows at once it kept change which pipelines run, not the step's
        // structure, and its scratch context leaves nothing behind.
        if std::env::var_os("GLINT_TUNE").is_none() {
            let pt = ModelParams {
                gpu_tune: Some(true),
                ..p.clone()
            };
            let mt = Model::load(common::model(name), &pt).unwrap();
            let tuned = mt.gpu_tune_report().is_some();
            assert_eq!(
                tuned,
                mt.backend_name().contains("matvec tuned at load"),
                "{}",
                mt.backend_name()
            );
            let fresh = Model::load(common::model(name), &p).unwrap().memory();
            assert_eq!(mt.memory(), fresh, "{name} tuned: what the backend holds");
            for n_seq in [1, 4] {
                let what = format!("{name} tuned x{n_seq}");
                let ct = common::gpu_step_in(&mt, 2, n_seq, &mut |step| allocs = heap::count(step));
                eprintln!("{what}: {ct:?}, {allocs} heap allocations");
                assert!(allocs <= b_heap(&ct), "{what}: {allocs} heap allocations");
                assert_eq!(ct.dispatches, c.dispatches, "{what}: {ct:?}");
                check_step(&what, &mt, &ct, n_seq as u32);
            }
        }
    }
}

/// The counters of a greedy step of `n_seq` sequences chained on the
/// device after two warm-up steps, in the context and at the positions of
/// [`common::gpu_step`]: the prompt in each sequence, a plain step of
/// their greedy tokens, then chained steps.
fn chained_step(model: &Model, n_seq: usize) -> (glint::GpuCounters, u64) {
    let (mut ctx, ids) = common::step_context(model, n_seq);
    let mut b = glint::Batch::new();
    for s in 0..n_seq as i32 {
        ctx.decode(&glint::Batch::from_tokens(&ids, 0, s)).unwrap();
        b.add(
            ctx.argmax(ids.len() - 1).unwrap(),
            ids.len() as i32,
            &[s],
            true,
        );
    }
    ctx.decode(&b).unwrap();
    let seqs: Vec<i32> = (0..n_seq as i32).collect();
    ctx.decode_greedy_seqs(&seqs).unwrap();
    let before = model.gpu_counters().unwrap();
    let allocs = heap::count(&mut || {
        ctx.decode_greedy_seqs(&seqs).unwrap();
    });
    (model.gpu_counters().unwrap().since(&before), allocs)
}

/// `glint devices` lists the cpu and the Vulkan adapter with its limits
/// and the optional features the kernels use (lavapipe has all three).
#[test]
fn devices_lists_the_cpu_and_the_adapters() {
    let (out, _) = common::success(common::glint(&["devices"]));
    assert!(out.starts_with("cpu: cpu ("), "{out}");
    assert!(
        out.contains("--adapter 0: ") && out.contains("(Vulkan, "),
        "{out}"
    );
    assert!(out.contains("max_storage_buffer_binding_size: "), "{out}");
    assert!(out.contains("max_immediate_size: "), "{out}");
    assert!(
        out.contains("features: shader-f16, subgroup, immediates\n"),
        "{out}"
    );
}
