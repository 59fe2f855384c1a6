//! Pre-tokenizers for byte-level BPE vocabularies, keyed by `tokenizer.ggml.pre`.
//!
//! One row per regex family, copied from llama.cpp's `llm_tokenizer_bpe`
//! (`src/llama-vocab.cpp`) together with the `tokenizer.ggml.pre` names that
//! select it there. The regexes of a row are applied in order, each one
//! splitting every piece the previous ones left; text between matches stays
//! a piece of its own (llama.cpp's `unicode_regex_split`, which is
//! `Split(regex, Isolated)` in the `tokenizers` crate).

/// GPT-2's split: contractions, letters, digits, other, whitespace runs.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's split (case-insensitive contractions spelled out, as llama.cpp has it).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's split: Qwen2's, with combining marks (`\p{M}`) inside words.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// CJK runs, as DeepSeek's splits have them.
const DEEPSEEK_CJK: &str = "[一-龥ࠀ-一가-퟿]+";

/// One pre-tokenizer family.
#[derive(Debug)]
pub(crate) struct PreTokenizerRow {
    /// `tokenizer.ggml.pre` values that select this row.
    pub names: &'static [&'static str],
    /// Regexes applied in order.
    pub regexes: &'static [&'static str],
    /// Whole words found in the vocabulary skip the merges (llama.cpp's `ignore_merges`).
    pub ignore_merges: bool,
    /// Default for adding BOS when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos: bool,
}

/// Every supported `tokenizer.ggml.pre`. `gpt2` is accepted beside
/// llama.cpp's own spelling `gpt-2`.
pub(crate) const PRE_TOKENIZERS: &[PreTokenizerRow] = &[
    PreTokenizerRow {
        names: &["default"],
        regexes: &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
        ],
        regexes: &[LLAMA3],
        ignore_merges: true,
        add_bos: true,
    },
    PreTokenizerRow {
        names: &["dbrx", "smaug-bpe"],
        regexes: &[LLAMA3],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &["falcon"],
        regexes: &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
        ],
        regexes: &[r"\p{N}", GPT2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &[
            "gpt-2",
            "gpt2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        regexes: &[GPT2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &[
            "qwen2",
            "deepseek-r1-qwen",
            "stablelm2",
            "megrez",
            "hunyuan",
            "solar-open",
        ],
        regexes: &[QWEN2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &["qwen35"],
        regexes: &[QWEN35],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &["deepseek-coder"],
        regexes: &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizerRow {
        names: &["deepseek-llm"],
        regexes: &[
            "[\r\n]",
            "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
            "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
            "\\s+$",
            DEEPSEEK_CJK,
            r"\p{N}+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
];

/// The row for `name`, if supported.
pub(crate) fn find(name: &str) -> Option<&'static PreTokenizerRow> {
    PRE_TOKENIZERS.iter().find(|r| r.names.contains(&name))
}

/// All supported names, comma-separated, for error messages.
pub(crate) fn supported_names() -> String {
    PRE_TOKENIZERS
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}
