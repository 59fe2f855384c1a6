//! The one error type of this crate. Every variant carries the values that
//! were wrong (key, tensor name, offsets, sizes) so that a message about a
//! broken file can be acted on without a hex editor.

use std::path::PathBuf;

/// Everything that can go wrong reading or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Opening, mapping or reading the file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },

    /// Writing a GGUF file failed.
    #[error("cannot write GGUF: {0}")]
    Write(#[source] std::io::Error),

    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected [47, 47, 55, 46] (\"GGUF\")")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },

    /// Version 1 used 32-bit counts and lengths; nothing current writes it.
    #[error("GGUF v1 is not supported (re-convert the model with a current llama.cpp)")]
    VersionOne,

    /// The version field reads as 2 or 3 once byte-swapped.
    #[error(
        "big-endian GGUF is not supported (version field {raw:#010x} reads as {swapped} byte-swapped)"
    )]
    BigEndian {
        /// The version field as read little-endian.
        raw: u32,
        /// The version it means big-endian.
        swapped: u32,
    },

    /// A version other than 1, 2 or 3.
    #[error("GGUF version {version} is not supported (only 2 and 3)")]
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },

    /// The file ends before something it declares.
    #[error(
        "truncated file: {what} at offset {offset} needs {needed} bytes, only {available} left"
    )]
    Truncated {
        /// What was being read.
        what: String,
        /// Absolute offset of the read.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },

    /// A count or length claims more elements than the rest of the file can
    /// hold even at their smallest encoding.
    #[error(
        "{what}: claims {count} elements needing at least {min_bytes} bytes, \
         but only {available} bytes are left at offset {offset}"
    )]
    LyingCount {
        /// What the count is of.
        what: String,
        /// The claimed count.
        count: u64,
        /// Minimum bytes those elements take (saturated at `u64::MAX`).
        min_bytes: u64,
        /// Bytes left in the file.
        available: u64,
        /// Absolute offset just after the count.
        offset: u64,
    },

    /// A length or count is above one of this crate's caps.
    #[error("{what} is {value}, above the cap of {cap}")]
    OverCap {
        /// What was measured.
        what: String,
        /// The value found.
        value: u64,
        /// The cap.
        cap: u64,
    },

    /// Arrays nested deeper than the cap.
    #[error("metadata key '{key}': arrays nested deeper than {cap} levels")]
    NestingTooDeep {
        /// The key holding the array.
        key: String,
        /// The cap.
        cap: usize,
    },

    /// A metadata value type id outside 0..=12.
    #[error("metadata key '{key}': unknown value type {type_id} at offset {offset}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The type id found.
        type_id: u32,
        /// Absolute offset of the type id.
        offset: u64,
    },

    /// A bool byte other than 0 or 1.
    #[error("metadata key '{key}': bool byte is {byte}, must be 0 or 1 (offset {offset})")]
    BadBool {
        /// The key.
        key: String,
        /// The byte found.
        byte: u8,
        /// Absolute offset of the byte.
        offset: u64,
    },

    /// A string (key, value or tensor name) that is not UTF-8.
    #[error("{what} is not valid UTF-8 (offset {offset})")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Absolute offset of the string bytes.
        offset: u64,
    },

    /// The same metadata key twice.
    #[error("duplicate metadata key '{key}'")]
    DuplicateKey {
        /// The key.
        key: String,
    },

    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment is {value}, must be a non-zero power of two")]
    BadAlignment {
        /// The value found.
        value: u64,
    },

    /// The same tensor name twice.
    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor {
        /// The name.
        name: String,
    },

    /// A tensor name of 64 bytes or more (ggml keeps names in `char[64]`
    /// with a terminating NUL).
    #[error("tensor name '{name}' is {len} bytes, ggml's limit is {max}")]
    TensorNameTooLong {
        /// The name.
        name: String,
        /// Its length in bytes.
        len: u64,
        /// Longest allowed length.
        max: u64,
    },

    /// `n_dims` outside 1..=4.
    #[error("tensor '{tensor}': n_dims is {n_dims}, must be 1..=4")]
    BadDimCount {
        /// The tensor.
        tensor: String,
        /// The value found.
        n_dims: u32,
    },

    /// A dimension of zero.
    #[error(
        "tensor '{tensor}': ne[{dim}] is 0 (ne = {ne:?}); an empty tensor holds no data \
         and no model has one"
    )]
    ZeroDim {
        /// The tensor.
        tensor: String,
        /// Which dimension.
        dim: usize,
        /// All dimensions read.
        ne: Vec<u64>,
    },

    /// The product of the dimensions overflows (ggml counts in `int64_t`).
    #[error("tensor '{tensor}': element count of ne = {ne:?} overflows i64")]
    ElementCountOverflow {
        /// The tensor.
        tensor: String,
        /// Its dimensions.
        ne: Vec<u64>,
    },

    /// A ggml type id glint does not know.
    #[error("tensor '{tensor}': unknown ggml type id {type_id}")]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The id found.
        type_id: u32,
    },

    /// Rows that are not a whole number of blocks.
    #[error(
        "tensor '{tensor}': ne[0] = {ne0} is not a multiple of {ty}'s block size {block_size}"
    )]
    NotWholeBlocks {
        /// The tensor.
        tensor: String,
        /// Its first dimension.
        ne0: u64,
        /// Its type.
        ty: glint_quant::GgmlType,
        /// The type's block size.
        block_size: usize,
    },

    /// Byte size or absolute offset overflows `u64`.
    #[error("tensor '{tensor}': {what} overflows u64")]
    TensorSizeOverflow {
        /// The tensor.
        tensor: String,
        /// Which computation.
        what: &'static str,
    },

    /// A tensor offset that is not a multiple of the alignment.
    #[error("tensor '{tensor}': offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        tensor: String,
        /// Its offset relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },

    /// Tensor data that runs past the end of the file.
    #[error(
        "tensor '{tensor}': data at bytes {start}..{end} (offset {offset} in the data section \
         at {data_offset}) runs past the end of the file ({file_size} bytes)"
    )]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Its offset relative to the data section.
        offset: u64,
        /// Absolute start of the data section.
        data_offset: u64,
        /// Absolute start of the tensor's bytes.
        start: u64,
        /// Absolute end (exclusive).
        end: u64,
        /// File size.
        file_size: u64,
    },

    /// Two tensors sharing bytes.
    #[error("tensors '{first}' (bytes {first_start}..{first_end}) and '{second}' (bytes {second_start}..{second_end}) overlap")]
    TensorOverlap {
        /// The tensor that starts first.
        first: String,
        /// Its absolute start.
        first_start: u64,
        /// Its absolute end.
        first_end: u64,
        /// The tensor starting inside it.
        second: String,
        /// Its absolute start.
        second_start: u64,
        /// Its absolute end.
        second_end: u64,
    },

    /// The header's data section offset overflows `u64`.
    #[error(
        "data section offset overflows u64 (tensor infos end at {end}, alignment {alignment})"
    )]
    DataOffsetOverflow {
        /// End of the tensor infos.
        end: u64,
        /// The alignment.
        alignment: u64,
    },

    /// A key that must be present is absent.
    #[error("missing metadata key '{key}'")]
    MissingKey {
        /// The key.
        key: String,
    },

    /// A key of another type than asked for.
    #[error("metadata key '{key}' is {found}, expected {expected}")]
    KeyType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The type in the file.
        found: String,
    },

    /// An integer key whose value does not fit the type asked for.
    #[error("metadata key '{key}' is {value}, which does not fit in {target}")]
    ValueOutOfRange {
        /// The key.
        key: String,
        /// The value, printed.
        value: String,
        /// The type asked for.
        target: &'static str,
    },

    /// Writer: bytes given for a tensor that are not its size.
    #[error("tensor '{tensor}': {ne:?} {ty} takes {expected} bytes, got {got}")]
    TensorBytesMismatch {
        /// The tensor.
        tensor: String,
        /// Its dimensions.
        ne: Vec<u64>,
        /// Its type.
        ty: glint_quant::GgmlType,
        /// Bytes the shape and type need.
        expected: u64,
        /// Bytes supplied.
        got: u64,
    },
}

/// Result with [`GgufError`].
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
