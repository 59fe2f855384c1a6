//! Round trips through the writer, one malformed file per check (built in
//! memory, byte by byte), and deterministic fuzzing of a valid file.

use std::panic::{catch_unwind, AssertUnwindSafe};

use glint_testkit::Rng; // seeded, so failures reproduce

use crate::*;

// ---- helpers ----

/// Assert that the error `e` matches `pattern`, printing it if not.
macro_rules! assert_err {
    ($e:expr, $($pattern:tt)+) => {
        assert!(matches!($e, $($pattern)+), "{}", $e)
    };
}

/// Raw GGUF bytes, for files the writer would refuse to produce.
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw(b"GGUF".to_vec()).u32(version).u64(n_tensors).u64(n_kv)
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(self, v: u8) -> Raw {
        self.bytes(&[v])
    }
    fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
    fn pad(self, align: usize) -> Raw {
        let n = self.0.len().next_multiple_of(align) - self.0.len();
        self.zeros(n)
    }
    fn zeros(self, n: usize) -> Raw {
        self.bytes(&vec![0; n])
    }
}

/// The error parsing `bytes`; fails the test if it parses.
fn parse_err(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Err(e) => e,
        Ok(f) => panic!("expected an error, parsed {f:?}"),
    }
}

/// Asserts the message of `e` contains every one of `parts`.
fn assert_names(e: &GgufError, parts: &[&str]) {
    let msg = e.to_string();
    for p in parts {
        assert!(msg.contains(p), "message {msg:?} should contain {p:?}");
    }
}

/// One F32 tensor `t` of 32 elements (128 bytes) at `offset`, with
/// `data_bytes` bytes in the data section.
fn one_f32_tensor(offset: u64, data_bytes: usize) -> Vec<u8> {
    one_tensor("t", &[32], 0, offset, data_bytes)
}

/// A file of two `[32]` F32 tensors at `offsets` in a 256-byte data section.
fn two_f32_tensors(names: [&str; 2], offsets: [u64; 2]) -> Vec<u8> {
    Raw::header(3, 2, 0)
        .tensor(names[0], &[32], 0, offsets[0])
        .tensor(names[1], &[32], 0, offsets[1])
        .pad(32)
        .zeros(256)
        .0
}

/// A file of one tensor info and `data_bytes` zero bytes of data after the
/// padding.
fn one_tensor(name: &str, dims: &[u64], type_id: u32, offset: u64, data_bytes: usize) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor(name, dims, type_id, offset)
        .pad(32)
        .zeros(data_bytes)
        .0
}

/// Every metadata value type, nested and empty arrays, unicode.
fn sample_metadata() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::String("llama".into())),
        ("general.name", Value::String("tëst ✓ 日本語 🦙".into())),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(-1.5e-5)),
        ("t.bool", Value::Bool(true)),
        ("t.empty_string", Value::String(String::new())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.a_u8", Value::Array(Array::U8(vec![0, 1, 255]))),
        ("t.a_i8", Value::Array(Array::I8(vec![-128, 0, 127]))),
        ("t.a_u16", Value::Array(Array::U16(vec![1, 65535]))),
        ("t.a_i16", Value::Array(Array::I16(vec![-1, 2]))),
        ("t.a_u32", Value::Array(Array::U32(vec![7, 8, 9]))),
        ("t.a_i32", Value::Array(Array::I32(vec![-7, 8, -9]))),
        ("t.a_f32", Value::Array(Array::F32(vec![0.5, -0.25, 1e30]))),
        (
            "t.a_bool",
            Value::Array(Array::Bool(vec![true, false, true])),
        ),
        (
            "t.a_str",
            Value::Array(Array::String(["a", "", "ü🦙"].into())),
        ),
        ("t.a_u64", Value::Array(Array::U64(vec![u64::MAX, 0]))),
        (
            "t.a_i64",
            Value::Array(Array::I64(vec![i64::MIN, i64::MAX])),
        ),
        ("t.a_f64", Value::Array(Array::F64(vec![-0.0, 1e-300]))),
        ("t.a_empty", Value::Array(Array::U32(vec![]))),
        ("t.a_empty_nested", Value::Array(Array::Array(vec![]))),
        (
            "t.a_nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(["x"].into()),
                Array::Array(vec![Array::Array(vec![Array::Bool(vec![false])])]),
            ])),
        ),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.context_length", Value::U64(4096)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("llama.rope.scaling.original_context_length", Value::I32(-1)),
        (
            "tokenizer.ggml.scores",
            Value::Array(Array::F32(vec![0.0, -1.0])),
        ),
    ]
}

/// `(name, dims, type, bytes)`.
type SampleTensor = (&'static str, Vec<u64>, GgmlType, Vec<u8>);

/// Tensors of four types with random bytes.
fn sample_tensors(rng: &mut Rng) -> Vec<SampleTensor> {
    let mut t = |name, dims: &[u64], ty: GgmlType| {
        let n = ty.bytes_for(dims.iter().product()).unwrap_or(0) as usize;
        (name, dims.to_vec(), ty, rng.bytes(n))
    };
    vec![
        t("token_embd.weight", &[64, 3], GgmlType::Q4_0),
        t("blk.0.attn_q.weight", &[8, 4], GgmlType::F16),
        t("blk.0.ffn_down.weight", &[32, 2, 1, 1], GgmlType::Q8_0),
        t("output_norm.weight", &[5], GgmlType::F32),
    ]
}

fn sample_file(alignment: Option<u32>) -> (Vec<u8>, Vec<SampleTensor>) {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.add_kv(KEY_ALIGNMENT, Value::U32(a)).unwrap();
    }
    for (k, v) in sample_metadata() {
        w.add_kv(k, v).unwrap();
    }
    let tensors = sample_tensors(&mut Rng(42));
    for (name, dims, ty, bytes) in &tensors {
        w.add_tensor(*name, dims, *ty, bytes.clone()).unwrap();
    }
    (w.to_bytes().unwrap(), tensors)
}

fn check_matches_sample(f: &GgufFile, tensors: &[SampleTensor], alignment: u64) {
    let expected: Vec<(String, Value)> = sample_metadata()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let got: Vec<(String, Value)> = f
        .metadata()
        .iter()
        .filter(|(k, _)| k != KEY_ALIGNMENT)
        .cloned()
        .collect();
    assert_eq!(got, expected);
    assert_eq!(f.alignment(), alignment);
    assert_eq!(f.data_offset() % alignment, 0);
    assert_eq!(f.tensors().len(), tensors.len());
    for (info, (name, dims, ty, bytes)) in f.tensors().iter().zip(tensors) {
        assert_eq!(info.name, *name);
        assert_eq!(info.dims(), dims.as_slice());
        assert_eq!(info.ty, *ty);
        assert_eq!(info.offset % alignment, 0, "{name}");
        assert_eq!(info.n_elements, dims.iter().product::<u64>());
        assert_eq!(info.n_bytes, bytes.len() as u64);
        assert_eq!(f.tensor_data(info), bytes.as_slice(), "{name}");
        assert_eq!(f.tensor_bytes(name), Some(bytes.as_slice()));
        assert_eq!(
            info.byte_range().start as u64,
            f.data_offset() + info.offset
        );
    }
    // Unused dims are 1.
    assert_eq!(
        f.tensor("output_norm.weight").map(|t| t.ne),
        Some([5, 1, 1, 1])
    );
    assert_eq!(f.tensor("missing"), None);
}

// ---- round trips ----

#[test]
fn round_trip_every_value_type_and_tensor_bytes() {
    let (bytes, tensors) = sample_file(None);
    let size = bytes.len() as u64;
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.file_size(), size);
    check_matches_sample(&f, &tensors, DEFAULT_ALIGNMENT);
}

#[test]
fn round_trip_respects_odd_alignments() {
    for align in [1u32, 64, 256] {
        let (bytes, tensors) = sample_file(Some(align));
        let f = GgufFile::from_bytes(bytes).unwrap();
        check_matches_sample(&f, &tensors, u64::from(align));
        assert_eq!(f.get_u32(KEY_ALIGNMENT).unwrap(), Some(align));
    }
}

#[test]
fn version_2_files_are_read() {
    let (mut bytes, tensors) = sample_file(None);
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 2);
    check_matches_sample(&f, &tensors, DEFAULT_ALIGNMENT);
}

#[test]
fn open_maps_a_file_written_by_the_writer() {
    let (bytes, tensors) = sample_file(Some(64));
    let path = std::env::temp_dir().join(format!("glint-gguf-open-{}.gguf", std::process::id()));
    let mut w = GgufWriter::new();
    w.add_kv(KEY_ALIGNMENT, Value::U32(64)).unwrap();
    for (k, v) in sample_metadata() {
        w.add_kv(k, v).unwrap();
    }
    for (name, dims, ty, b) in &tensors {
        w.add_tensor(*name, dims, *ty, b.clone()).unwrap();
    }
    let written = w.write_to_path(&path).unwrap();
    assert_eq!(written, bytes.len() as u64);
    let f = GgufFile::open(&path);
    let _ = std::fs::remove_file(&path);
    let f = f.unwrap();
    assert_eq!(
        f.bytes(),
        bytes.as_slice(),
        "to_bytes and write_to_path agree"
    );
    check_matches_sample(&f, &tensors, 64);

    // The storage outlives the GgufFile, and ranges index it directly.
    let range = f.tensor("blk.0.attn_q.weight").unwrap().byte_range();
    let storage = f.storage();
    drop(f);
    assert_eq!(
        (*storage).as_ref().get(range),
        Some(tensors[1].3.as_slice())
    );
}

#[test]
fn file_is_shareable_across_threads_and_foreign_infos_slice_empty() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<GgufFile>();
    let (bytes, _) = sample_file(None);
    let big = GgufFile::from_bytes(bytes).unwrap();
    let small = GgufFile::from_bytes(one_f32_tensor(0, 128)).unwrap();
    let far = big
        .tensors()
        .iter()
        .max_by_key(|t| t.byte_range().end)
        .unwrap();
    assert!(far.byte_range().end as u64 > small.file_size());
    assert_eq!(small.tensor_data(far), &[] as &[u8]);
}

#[test]
fn open_of_a_missing_file_names_the_path() {
    let e = GgufFile::open("/nonexistent/glint/model.gguf").unwrap_err();
    assert_err!(e, GgufError::Io { .. });
    assert_names(&e, &["/nonexistent/glint/model.gguf"]);
}

#[test]
fn streamed_tensors_match_owned_ones_and_sizes_are_checked() {
    let (bytes, tensors) = sample_file(None);
    let mut w = GgufWriter::new();
    for (k, v) in sample_metadata() {
        w.add_kv(k, v).unwrap();
    }
    for (name, dims, ty, b) in tensors.clone() {
        w.add_tensor_with(name, &dims, ty, move |out| out.write_all(&b))
            .unwrap();
    }
    assert_eq!(w.to_bytes().unwrap(), bytes);

    let mut w = GgufWriter::new();
    w.add_tensor_with("short", &[32], GgmlType::F32, |out| {
        out.write_all(&[0; 100])
    })
    .unwrap();
    let e = w.to_bytes().unwrap_err();
    assert_err!(
        e,
        GgufError::TensorBytesMismatch {
            expected: 128,
            got: 100,
            ..
        }
    );
    assert_names(&e, &["'short'", "128", "100"]);
}

#[test]
fn writer_checks_tensors_and_keys() {
    let mut w = GgufWriter::new();
    let e = w
        .add_tensor("t", &[32], GgmlType::F32, vec![0; 127])
        .unwrap_err();
    assert_err!(
        e,
        GgufError::TensorBytesMismatch {
            expected: 128,
            got: 127,
            ..
        }
    );
    let e = w
        .add_tensor("q", &[33], GgmlType::Q4_0, vec![])
        .unwrap_err();
    assert_err!(
        e,
        GgufError::NotWholeBlocks {
            ne0: 33,
            block_size: 32,
            ..
        }
    );
    let e = w
        .add_tensor("x".repeat(64), &[1], GgmlType::F32, vec![0; 4])
        .unwrap_err();
    assert_err!(
        e,
        GgufError::TensorNameTooLong {
            len: 64,
            max: 63,
            ..
        }
    );
    w.add_tensor("x".repeat(63), &[1], GgmlType::F32, vec![0; 4])
        .unwrap();
    let e = w
        .add_tensor("x".repeat(63), &[1], GgmlType::F32, vec![0; 4])
        .unwrap_err();
    assert_err!(e, GgufError::DuplicateTensor { .. });
    let e = w
        .add_tensor("d", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4])
        .unwrap_err();
    assert_err!(e, GgufError::BadDimCount { n_dims: 5, .. });
    w.add_kv("a", Value::U8(1)).unwrap();
    let e = w.add_kv("a", Value::U8(2)).unwrap_err();
    assert_err!(e, GgufError::DuplicateKey { .. });
    let e = w.add_kv(KEY_ALIGNMENT, Value::U32(48)).unwrap_err();
    assert_err!(e, GgufError::BadAlignment { value: 48 });
    let e = w.add_kv(KEY_ALIGNMENT, Value::U64(64)).unwrap_err();
    assert_err!(e, GgufError::KeyType { .. });
}

// ---- getters and architecture keys ----

#[test]
fn typed_getters_check_types_and_presence() {
    let (bytes, _) = sample_file(None);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.get_str("general.name").unwrap(), Some("tëst ✓ 日本語 🦙"));
    assert_eq!(f.get_u32("t.u32").unwrap(), Some(4_000_000_000));
    assert_eq!(f.get_u64("t.u64").unwrap(), Some(u64::MAX));
    assert_eq!(f.get_i32("t.i32").unwrap(), Some(-2_000_000_000));
    assert_eq!(f.get_f32("t.f32").unwrap(), Some(-1.5e-5));
    assert_eq!(f.get_bool("t.bool").unwrap(), Some(true));
    assert_eq!(
        f.get_str_array("t.a_str").unwrap().map(|a| a.len()),
        Some(3)
    );
    assert_eq!(
        f.get_f32_array("t.a_f32").unwrap(),
        Some(&[0.5, -0.25, 1e30][..])
    );
    assert_eq!(f.get_i32_array("t.a_i32").unwrap(), Some(&[-7, 8, -9][..]));
    assert_eq!(f.get_u32_array("t.a_empty").unwrap(), Some(&[][..]));
    assert_eq!(f.get_usize("t.u8").unwrap(), Some(200));
    assert_eq!(
        f.get_usize("t.u64").unwrap(),
        usize::try_from(u64::MAX).ok()
    );
    assert_eq!(f.get_u32("absent").unwrap(), None);

    let e = f.get_u32("t.u64").unwrap_err();
    assert_err!(
        e,
        GgufError::KeyType {
            expected: "u32",
            ..
        }
    );
    assert_names(&e, &["'t.u64'", "u64", "u32"]);
    let e = f.get_f32_array("t.a_i32").unwrap_err();
    assert_names(&e, &["'t.a_i32'", "array of i32", "array of f32"]);
    let e = f.get_usize("t.i8").unwrap_err();
    assert_err!(e, GgufError::ValueOutOfRange { .. });
    assert_names(&e, &["'t.i8'", "-100", "usize"]);
    let e = f.get_usize("t.f32").unwrap_err();
    assert_err!(e, GgufError::KeyType { .. });
    let e = f.require_str("absent.key").unwrap_err();
    assert_err!(e, GgufError::MissingKey { .. });
    assert_names(&e, &["'absent.key'"]);
}

#[test]
fn architecture_keys_come_from_the_table() {
    let (bytes, _) = sample_file(None);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(
        f.arch_key(Key::HeadCount).unwrap(),
        "llama.attention.head_count"
    );
    assert_eq!(f.require_arch_u32(Key::HeadCount).unwrap(), 4);
    assert_eq!(f.require_arch_usize(Key::ContextLength).unwrap(), 4096);
    assert_eq!(f.arch_f32(Key::LayerNormRmsEpsilon).unwrap(), Some(1e-6));
    assert_eq!(f.arch_u32(Key::ExpertCount).unwrap(), None);
    let e = f
        .require_arch_usize(Key::RopeScalingOrigCtxLen)
        .unwrap_err();
    assert_names(&e, &["'llama.rope.scaling.original_context_length'", "-1"]);
    let e = f.require_arch_u32(Key::BlockCount).unwrap_err();
    assert_names(&e, &["'llama.block_count'"]);

    let f = GgufFile::from_bytes(GgufWriter::new().to_bytes().unwrap()).unwrap();
    let e = f.arch_key(Key::HeadCount).unwrap_err();
    assert_names(&e, &["'general.architecture'"]);
}

// ---- header ----

#[test]
fn bad_magic() {
    let e = parse_err(b"GGML\x03\0\0\0".to_vec());
    assert_err!(
        e,
        GgufError::BadMagic {
            found: [0x47, 0x47, 0x4d, 0x4c]
        }
    );
    assert_names(&e, &["47, 47, 4d, 4c"]);
}

#[test]
fn version_one_is_refused() {
    let e = parse_err(Raw::header(1, 0, 0).0);
    assert_err!(e, GgufError::VersionOne);
    assert_names(&e, &["GGUF v1 is not supported"]);
}

#[test]
fn big_endian_is_refused() {
    let e = parse_err(Raw::header(3u32.swap_bytes(), 0, 0).0);
    assert_err!(e, GgufError::BigEndian { swapped: 3, .. });
    assert_names(&e, &["big-endian", "0x03000000"]);
    let e = parse_err(Raw::header(4, 0, 0).0);
    assert_err!(e, GgufError::UnsupportedVersion { version: 4 });
}

#[test]
fn truncated_header() {
    let mut b = Raw::header(3, 0, 0).0;
    b.truncate(12);
    let e = parse_err(b);
    assert_err!(
        e,
        GgufError::Truncated {
            offset: 8,
            needed: 8,
            available: 4,
            ..
        }
    );
    assert_names(&e, &["tensor_count", "offset 8"]);
    let e = parse_err(b"GG".to_vec());
    assert_err!(e, GgufError::Truncated { .. });
}

#[test]
fn counts_lying_or_over_the_cap() {
    let e = parse_err(Raw::header(3, 0, 1000).zeros(100).0);
    assert_err!(
        e,
        GgufError::LyingCount {
            count: 1000,
            min_bytes: 13000,
            available: 100,
            ..
        }
    );
    let e = parse_err(Raw::header(3, MAX_TENSORS + 1, 0).0);
    assert_err!(e, GgufError::OverCap { .. });
    assert_names(&e, &["tensor_count", &(MAX_TENSORS + 1).to_string()]);
    let e = parse_err(Raw::header(3, 0, u64::MAX).0);
    assert_names(&e, &["metadata_kv_count", &u64::MAX.to_string()]);
}

// ---- metadata ----

#[test]
fn lying_string_length() {
    let e = parse_err(Raw::header(3, 0, 1).str("k").u32(8).u64(u64::MAX).0);
    assert_err!(
        e,
        GgufError::OverCap {
            value: u64::MAX,
            cap: MAX_STRING_LEN,
            ..
        }
    );
    assert_names(&e, &["'k'", &u64::MAX.to_string()]);
    // Under the cap but past the end of the file.
    let e = parse_err(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(8)
            .u64(1000)
            .bytes(b"abc")
            .0,
    );
    assert_err!(
        e,
        GgufError::Truncated {
            needed: 1000,
            available: 3,
            ..
        }
    );
    assert_names(&e, &["'k'", "1000"]);
}

#[test]
fn lying_key_length() {
    let e = parse_err(Raw::header(3, 0, 1).u64(MAX_KEY_LEN + 1).zeros(20).0);
    assert_err!(
        e,
        GgufError::OverCap {
            cap: MAX_KEY_LEN,
            ..
        }
    );
    assert_names(&e, &["metadata key #0"]);
}

#[test]
fn lying_array_length() {
    let e = parse_err(
        Raw::header(3, 0, 1)
            .str("arr")
            .u32(9)
            .u32(4)
            .u64(1 << 40)
            .u32(1)
            .0,
    );
    assert_err!(
        e,
        GgufError::LyingCount {
            count: 1099511627776,
            available: 4,
            ..
        }
    );
    assert_names(&e, &["'arr'", "u32", "1099511627776", "4398046511104"]);
    // n * min_size overflowing u64 is refused the same way.
    let e = parse_err(
        Raw::header(3, 0, 1)
            .str("arr")
            .u32(9)
            .u32(8)
            .u64(u64::MAX)
            .0,
    );
    assert_err!(e, GgufError::LyingCount { .. });
}

fn nested(levels: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 0, 1).str("deep").u32(9);
    for _ in 1..levels {
        r = r.u32(9).u64(1);
    }
    r.u32(0).u64(0).0
}

#[test]
fn nesting_deeper_than_the_cap() {
    let f = GgufFile::from_bytes(nested(MAX_ARRAY_DEPTH)).unwrap();
    let mut a = f.get_array("deep").unwrap().unwrap();
    for _ in 1..MAX_ARRAY_DEPTH {
        a = match a {
            Array::Array(v) if v.len() == 1 => &v[0],
            other => panic!("expected one nested array, got {other:?}"),
        };
    }
    assert_eq!(a, &Array::U8(vec![]));
    let e = parse_err(nested(MAX_ARRAY_DEPTH + 1));
    assert_err!(
        e,
        GgufError::NestingTooDeep {
            cap: MAX_ARRAY_DEPTH,
            ..
        }
    );
    assert_names(&e, &["'deep'", "4"]);
}

#[test]
fn bad_bool_byte() {
    let e = parse_err(Raw::header(3, 0, 1).str("b").u32(7).u8(2).0);
    assert_err!(
        e,
        GgufError::BadBool {
            byte: 2,
            offset: 37,
            ..
        }
    );
    assert_names(&e, &["'b'", "2"]);
    let e = parse_err(
        Raw::header(3, 0, 1)
            .str("bs")
            .u32(9)
            .u32(7)
            .u64(2)
            .u8(1)
            .u8(7)
            .0,
    );
    assert_err!(e, GgufError::BadBool { byte: 7, .. });
}

#[test]
fn unknown_value_type() {
    let e = parse_err(Raw::header(3, 0, 1).str("k").u32(13).u32(0).0);
    assert_err!(e, GgufError::UnknownValueType { type_id: 13, .. });
    assert_names(&e, &["'k'", "13"]);
}

#[test]
fn bad_alignment() {
    for a in [0u32, 3] {
        let e = parse_err(Raw::header(3, 0, 1).kv_u32(KEY_ALIGNMENT, a).0);
        assert_err!(e, GgufError::BadAlignment { value } if value == u64::from(a));
        assert_names(&e, &["general.alignment", &a.to_string()]);
    }
    let e = parse_err(Raw::header(3, 0, 1).str(KEY_ALIGNMENT).u32(10).u64(32).0);
    assert_err!(
        e,
        GgufError::KeyType {
            expected: "u32",
            ..
        }
    );
}

#[test]
fn duplicate_key() {
    let e = parse_err(Raw::header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).0);
    assert_err!(e, GgufError::DuplicateKey { .. });
    assert_names(&e, &["'a.b'"]);
}

#[test]
fn invalid_utf8() {
    let e = parse_err(
        Raw::header(3, 0, 1)
            .u64(2)
            .bytes(&[0xff, 0xfe])
            .u32(4)
            .u32(1)
            .0,
    );
    assert_err!(e, GgufError::InvalidUtf8 { offset: 32, .. });
    assert_names(&e, &["metadata key #0", "UTF-8"]);
    let e = parse_err(Raw::header(3, 0, 1).str("k").u32(8).u64(1).bytes(&[0xc3]).0);
    assert_names(&e, &["'k'", "UTF-8"]);
}

// ---- tensor infos ----

#[test]
fn unknown_tensor_type() {
    for id in [4u32, 9999] {
        let e = parse_err(one_tensor("w", &[32], id, 0, 256));
        assert_err!(e, GgufError::UnknownTensorType { type_id, .. } if type_id == id);
        assert_names(&e, &["'w'", &id.to_string()]);
    }
}

#[test]
fn n_dims_outside_1_to_4() {
    for n in [0u32, 5] {
        let dims = vec![1u64; n as usize];
        let e = parse_err(one_tensor("w", &dims, 0, 0, 32));
        assert_err!(e, GgufError::BadDimCount { n_dims, .. } if n_dims == n);
        assert_names(&e, &["'w'", &n.to_string()]);
    }
}

#[test]
fn zero_dimension() {
    let e = parse_err(one_tensor("w", &[32, 0], 0, 0, 0));
    assert_err!(e, GgufError::ZeroDim { dim: 1, .. });
    assert_names(&e, &["'w'", "ne[1]", "[32, 0]"]);
}

#[test]
fn ne0_not_a_multiple_of_the_block_size() {
    // Q4_0 (id 2), 32 per block.
    let e = parse_err(one_tensor("q", &[48, 2], 2, 0, 64));
    assert_err!(
        e,
        GgufError::NotWholeBlocks {
            ne0: 48,
            block_size: 32,
            ..
        }
    );
    assert_names(&e, &["'q'", "48", "Q4_0", "32"]);
}

#[test]
fn element_count_overflow() {
    for dims in [&[1u64 << 32, 1 << 32][..], &[1 << 62, 4], &[1 << 63]] {
        let e = parse_err(one_tensor("big", dims, 0, 0, 0));
        assert_err!(e, GgufError::ElementCountOverflow { .. });
        assert_names(&e, &["'big'", &dims[0].to_string()]);
    }
    // Fits i64 as elements, overflows u64 as F32 bytes.
    let e = parse_err(one_tensor("big", &[1 << 62], 0, 0, 0));
    assert_err!(e, GgufError::TensorSizeOverflow { .. });
}

#[test]
fn tensor_name_too_long() {
    let name = "n".repeat(64);
    let e = parse_err(one_tensor(&name, &[1], 0, 0, 32));
    assert_err!(
        e,
        GgufError::TensorNameTooLong {
            len: 64,
            max: 63,
            ..
        }
    );
    assert_names(&e, &[&name, "64"]);
    // A lying name length is refused without reading it.
    let e = parse_err(Raw::header(3, 1, 0).u64(u64::MAX).zeros(32).0);
    assert_err!(e, GgufError::TensorNameTooLong { len: u64::MAX, .. });
}

#[test]
fn offset_misaligned() {
    let e = parse_err(one_f32_tensor(16, 256));
    assert_err!(
        e,
        GgufError::MisalignedTensor {
            offset: 16,
            alignment: 32,
            ..
        }
    );
    assert_names(&e, &["'t'", "16", "32"]);
}

#[test]
fn offset_past_end_of_file() {
    // Header 24 + info (8+1+4+8+4+8 = 33) = 57, data at 64.
    assert_eq!(
        GgufFile::from_bytes(one_f32_tensor(0, 128))
            .unwrap()
            .data_offset(),
        64
    );
    let e = parse_err(one_f32_tensor(0, 127));
    assert_err!(
        e,
        GgufError::TensorOutOfBounds {
            start: 64,
            end: 192,
            file_size: 191,
            ..
        }
    );
    assert_names(&e, &["'t'", "64..192", "191"]);
    let e = parse_err(one_f32_tensor(u64::MAX - 31, 128));
    assert_err!(e, GgufError::TensorSizeOverflow { .. });
}

#[test]
fn overlapping_tensors() {
    let b = two_f32_tensors(["a", "b"], [0, 96]);
    let e = parse_err(b);
    assert_err!(e, GgufError::TensorOverlap { .. });
    assert_names(&e, &["'a'", "'b'"]);
    // Touching is fine.
    let b = two_f32_tensors(["a", "b"], [0, 128]);
    assert_eq!(GgufFile::from_bytes(b).unwrap().tensors().len(), 2);
}

#[test]
fn duplicate_tensor_name() {
    let b = two_f32_tensors(["w", "w"], [0, 128]);
    let e = parse_err(b);
    assert_err!(e, GgufError::DuplicateTensor { .. });
    assert_names(&e, &["'w'"]);
}

// ---- fuzzing ----

/// Parses `bytes` inside `catch_unwind`; a panic fails the test with `ctx`.
/// When it parses, every tensor must slice in bounds at its declared size.
fn parse_never_panics(bytes: Vec<u8>, ctx: &dyn Fn() -> String) -> bool {
    let len = bytes.len();
    let r = catch_unwind(AssertUnwindSafe(|| {
        GgufFile::from_bytes(bytes).map(|f| {
            let mut ends = Vec::new();
            for t in f.tensors() {
                let r = t.byte_range();
                assert!(r.start <= r.end && r.end <= len, "{t:?}");
                assert_eq!(r.start as u64, f.data_offset() + t.offset);
                assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
                assert_eq!(t.ty.bytes_for(t.n_elements), Some(t.n_bytes));
                assert_eq!(t.offset % f.alignment(), 0);
                ends.push((r.start, r.end));
            }
            ends.sort();
            assert!(ends.windows(2).all(|w| w[0].1 <= w[1].0), "overlap");
        })
    }));
    match r {
        Ok(res) => res.is_ok(),
        Err(_) => panic!("parser panicked on {}", ctx()),
    }
}

#[test]
fn every_strict_prefix_is_an_error_until_the_last_tensor_ends() {
    let (bytes, _) = sample_file(None);
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let data_end = f
        .tensors()
        .iter()
        .map(|t| t.byte_range().end)
        .max()
        .unwrap();
    assert!(
        bytes.len() > 1000,
        "the sample should be a few KB, is {}",
        bytes.len()
    );
    for len in 0..bytes.len() {
        let ok = parse_never_panics(bytes[..len].to_vec(), &|| format!("prefix of {len} bytes"));
        // Past the last tensor only padding is cut, which is still a file.
        assert_eq!(
            ok,
            len >= data_end,
            "prefix of {len} bytes (data ends at {data_end})"
        );
    }
}

#[test]
fn random_corruptions_never_panic() {
    let (bytes, _) = sample_file(None);
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let meta_end = f.data_offset() as usize;
    let interesting = [
        0u64,
        1,
        2,
        3,
        4,
        63,
        64,
        1 << 31,
        1 << 32,
        1 << 62,
        1 << 63,
        u64::MAX,
    ];
    let mut rng = Rng(0x5eed);
    let (mut n_ok, mut n_err) = (0, 0);
    for i in 0..6000 {
        let mut b = bytes.clone();
        let mode = i % 3;
        match mode {
            0 => {
                let p = rng.below(meta_end);
                b[p] = rng.next_u64() as u8;
            }
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let p = rng.below(b.len());
                    b[p] = rng.next_u64() as u8;
                }
            }
            _ => {
                // Aimed at length/count fields: a u64 over any header byte.
                let p = rng.below(meta_end - 8);
                let v = if rng.next_u64().is_multiple_of(2) {
                    interesting[rng.below(interesting.len())]
                } else {
                    rng.next_u64() >> rng.below(64)
                };
                b[p..p + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        if parse_never_panics(b, &|| format!("corruption #{i} (mode {mode})")) {
            n_ok += 1;
        } else {
            n_err += 1;
        }
    }
    // Both outcomes happen, so the test exercises the checks and the Ok path.
    assert!(n_ok > 100 && n_err > 1000, "ok {n_ok}, err {n_err}");
}
