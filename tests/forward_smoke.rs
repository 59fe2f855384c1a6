mod common;
use glint_backend::{Backend, GgmlType};

#[test]
fn smollm2_forward_cpu_first_look() {
    let f = glint::gguf::GgufFile::open(common::model("smollm2")).unwrap();
    let hp = glint_model::HParams::from_gguf(&f).unwrap();
    let be = glint_cpu::CpuBackend::new(None).unwrap();
    let w = glint_model::Weights::load(&f, &hp, &be).unwrap();
    let kv = glint_model::KvStorage::new(&be, &hp, 64, GgmlType::F16, GgmlType::F16).unwrap();
    let s = glint_model::Scratch::new(&be, &hp, 8, 64).unwrap();
    let toks = [504, 3575, 282, 4649, 314];
    let t = toks.len();
    let pos: Vec<i32> = (0..t as i32).collect();
    let n_kv = 32;
    let mut mask = vec![f32::NEG_INFINITY; n_kv * t];
    for i in 0..t {
        for j in 0..=i {
            mask[i * n_kv + j] = 0.0;
        }
    }
    let ub = glint_model::UBatch {
        tokens: &toks,
        pos: &pos,
        rows: &pos,
        kv_start: 0,
        n_kv,
        mask: &mask,
        mask_swa: None,
        outputs: &[4],
    };
    let out = glint_model::forward(&be, &hp, &w, &kv, &s, &ub)
        .unwrap()
        .unwrap();
    let mut buf = vec![0u8; hp.n_vocab * 4];
    be.read(&out.logits, 0, &mut buf).unwrap();
    let logits: Vec<f32> = bytemuck::cast_slice(&buf).to_vec();
    let (_, want) = common::read_npy_f32(&common::reference("gen_smollm2/logits_last.npy"));
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let maxdiff = logits
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "top5 {:?}",
        idx[..5].iter().map(|&i| (i, logits[i])).collect::<Vec<_>>()
    );
    eprintln!("maxdiff {maxdiff}");
    assert_eq!(idx[0], 7042);
}
