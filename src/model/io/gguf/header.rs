//! A bounded first pass over a GGUF header, made before candle's reader sees the file. candle
//! checks lengths against the file size, but divides by `general.alignment` unchecked (0 panics),
//! multiplies tensor dimensions unchecked, and accepts counts up to 2^30 whose values cost ~32
//! bytes of memory per byte of file. This pass reads the same fields without keeping them,
//! with checked arithmetic, and refuses what candle would panic on, what llama.cpp refuses
//! (an alignment that is not a power of two, duplicate tensor names, tensors past the end of the
//! file) and counts far beyond any real model's, so that what candle then reads is bounded by
//! the caps below and by the file's own size.
use candle_core::quantized::GgmlDType;
use std::collections::HashSet;
use std::io::{BufReader, Read, Seek, SeekFrom};

/// Most tensors a file may hold (the largest real models: ~1,100).
pub const MAX_TENSORS: u64 = 1 << 16;
/// Most metadata entries (real files: a few dozen).
pub const MAX_METADATA_KEYS: u64 = 1 << 16;
/// Most elements of one metadata array (the largest vocabularies and merge lists: ~260k–500k).
pub const MAX_ARRAY_LEN: u64 = 1 << 21;
/// Most metadata values in all, array elements included (real files: up to ~800k; candle
/// keeps each in ~32 bytes of memory).
pub const MAX_VALUES: u64 = 1 << 22;
/// Most bytes of all metadata strings and keys together (real files: a few MB).
pub const MAX_STRING_BYTES: u64 = 1 << 28;
/// Longest tensor name (llama.cpp's `GGML_MAX_NAME` is 64).
pub const MAX_TENSOR_NAME: u64 = 256;
/// Deepest nesting of metadata arrays (real files do not nest).
pub const MAX_DEPTH: usize = 4;
/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// The alignment of the tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

type R<T> = std::result::Result<T, String>;

/// What the pass learnt: enough to say where each tensor's bytes lie.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// GGUF version (1, 2 or 3).
    pub version: u32,
    /// Tensors in the file.
    pub tensors: u64,
    /// Metadata entries.
    pub metadata_keys: u64,
    /// `general.alignment`, or the default.
    pub alignment: u64,
    /// Where the tensor data starts.
    pub data_offset: u64,
}

/// One tensor's entry, kept until the data offset is known.
struct Entry {
    name: String,
    offset: u64,
    bytes: u64,
}

/// Checks the header of the GGUF file read by `r` (from its start) as described in the module
/// doc; the error says which field is wrong and why.
pub fn check<F: Read + Seek>(r: F) -> R<Summary> {
    let mut r = BufReader::new(r);
    let file_len = r
        .seek(SeekFrom::End(0))
        .map_err(|e| format!("cannot read it: {e}"))?;
    r.seek(SeekFrom::Start(0))
        .map_err(|e| format!("cannot read it: {e}"))?;
    let mut s = Scan {
        r,
        file_len,
        pos: 0,
        wide: true,
        values: 0,
        string_bytes: 0,
    };
    let magic = s.u32("the magic number")?;
    if magic != 0x4655_4747 && magic != 0x4747_5546 {
        return Err(format!(
            "does not start with the GGUF magic (found 0x{magic:08x})"
        ));
    }
    let version = s.u32("the version")?;
    if !(1..=3).contains(&version) {
        return Err(format!(
            "GGUF version {version} is not supported (1, 2 or 3)"
        ));
    }
    s.wide = version >= 2;
    let tensors = s.len("the tensor count")?;
    let keys = s.len("the metadata entry count")?;
    if tensors > MAX_TENSORS {
        return Err(format!(
            "the header declares {tensors} tensors; at most {MAX_TENSORS} are accepted"
        ));
    }
    if keys > MAX_METADATA_KEYS {
        return Err(format!(
            "the header declares {keys} metadata entries; at most {MAX_METADATA_KEYS} are accepted"
        ));
    }
    let mut alignment = None;
    for i in 0..keys {
        let key = s.string(&format!("metadata key #{i}"), MAX_STRING_BYTES)?;
        let ty = s.u32(&format!("the type of metadata `{key}`"))?;
        if key == "general.alignment" {
            alignment = Some(s.alignment(ty)?);
        } else {
            s.value(&key, ty, 0)?;
        }
    }
    let mut names = HashSet::new();
    let mut entries = Vec::new();
    for i in 0..tensors {
        let name = s.string(&format!("the name of tensor #{i}"), MAX_TENSOR_NAME)?;
        let what = |field: &str| format!("{field} of tensor `{name}`");
        let n_dims = s.u32(&what("the dimension count"))?;
        if n_dims > MAX_DIMS {
            return Err(format!(
                "tensor `{name}` has {n_dims} dimensions; at most {MAX_DIMS}"
            ));
        }
        let mut elems: u64 = 1;
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = s.len(&what("a dimension"))?;
            dims.push(d);
            elems = elems.checked_mul(d).ok_or_else(|| {
                format!("tensor `{name}` has dimensions whose product overflows: {dims:?}")
            })?;
        }
        let code = s.u32(&what("the type"))?;
        let dtype = ggml_dtype(code)
            .ok_or_else(|| format!("tensor `{name}` has type {code}, which is not supported"))?;
        let block = dtype.block_size() as u64;
        if !elems.is_multiple_of(block) {
            return Err(format!(
                "tensor `{name}` has {elems} elements, not a multiple of its type's block of {block}"
            ));
        }
        let bytes = (elems / block)
            .checked_mul(dtype.type_size() as u64)
            .filter(|&b| b <= file_len && usize::try_from(elems).is_ok())
            .ok_or_else(|| {
                format!(
                    "tensor `{name}` ({dims:?}, {dtype:?}) would need more bytes than the file's {file_len}"
                )
            })?;
        let offset = s.u64(&what("the offset"))?;
        if !names.insert(name.clone()) {
            return Err(format!("tensor `{name}` is listed twice"));
        }
        entries.push(Entry {
            name,
            offset,
            bytes,
        });
    }
    let alignment = alignment.unwrap_or(DEFAULT_ALIGNMENT);
    let data_offset = s
        .pos
        .div_ceil(alignment)
        .checked_mul(alignment)
        .ok_or("the tensor data offset overflows")?;
    for e in &entries {
        let end = data_offset
            .checked_add(e.offset)
            .and_then(|start| start.checked_add(e.bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(format!(
                "tensor `{}` ({} bytes at offset {} after the header) lies beyond the end of the \
                     {file_len}-byte file (truncated?)",
                e.name, e.bytes, e.offset
            ))
            }
        }
    }
    Ok(Summary {
        version,
        tensors,
        metadata_keys: keys,
        alignment,
        data_offset,
    })
}

/// candle's GGML types by their file code (`GgmlDType::from_u32`, which candle keeps private).
fn ggml_dtype(code: u32) -> Option<GgmlDType> {
    use GgmlDType::*;
    Some(match code {
        0 => F32,
        1 => F16,
        2 => Q4_0,
        3 => Q4_1,
        6 => Q5_0,
        7 => Q5_1,
        8 => Q8_0,
        9 => Q8_1,
        10 => Q2K,
        11 => Q3K,
        12 => Q4K,
        13 => Q5K,
        14 => Q6K,
        15 => Q8K,
        30 => BF16,
        _ => return None,
    })
}

/// Metadata value types (GGUF `gguf_type`).
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// Bytes of a fixed-size value type; `None` for strings and arrays (and unknown types).
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        T_U8 | T_I8 | T_BOOL => Some(1),
        T_U16 | T_I16 => Some(2),
        T_U32 | T_I32 | T_F32 => Some(4),
        T_U64 | T_I64 | T_F64 => Some(8),
        _ => None,
    }
}

struct Scan<F> {
    r: BufReader<F>,
    file_len: u64,
    /// Bytes consumed so far.
    pos: u64,
    /// Version ≥ 2: lengths and counts are u64 (u32 in version 1).
    wide: bool,
    /// Metadata values seen (array elements included).
    values: u64,
    /// Bytes of keys and strings seen.
    string_bytes: u64,
}

impl<F: Read + Seek> Scan<F> {
    fn remaining(&self) -> u64 {
        self.file_len.saturating_sub(self.pos)
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> R<[u8; N]> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|_| format!("ends inside {what} (at byte {})", self.pos))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> R<u32> {
        Ok(u32::from_le_bytes(self.bytes(what)?))
    }

    fn u64(&mut self, what: &str) -> R<u64> {
        Ok(u64::from_le_bytes(self.bytes(what)?))
    }

    /// A length or count: u64 from version 2 on, u32 in version 1.
    fn len(&mut self, what: &str) -> R<u64> {
        if self.wide {
            self.u64(what)
        } else {
            self.u32(what).map(u64::from)
        }
    }

    fn skip(&mut self, n: u64, what: &str) -> R<()> {
        if n > self.remaining() {
            return Err(format!(
                "{what} needs {n} bytes at byte {}, past the end of the {}-byte file",
                self.pos, self.file_len
            ));
        }
        let step = i64::try_from(n).map_err(|_| format!("{what} is too long"))?;
        self.r
            .seek_relative(step)
            .map_err(|e| format!("cannot read {what}: {e}"))?;
        self.pos += n;
        Ok(())
    }

    /// A length-prefixed string of at most `max` bytes, read (for keys and names).
    fn string(&mut self, what: &str, max: u64) -> R<String> {
        let n = self.string_len(what, max)?;
        let mut b = vec![0u8; n as usize];
        self.r
            .read_exact(&mut b)
            .map_err(|_| format!("ends inside {what}"))?;
        self.pos += n;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// The length of a string, checked against `max`, the file and the strings' budget.
    fn string_len(&mut self, what: &str, max: u64) -> R<u64> {
        let n = self.len(what)?;
        if n > max {
            return Err(format!(
                "{what} is {n} bytes long; at most {max} are accepted"
            ));
        }
        if n > self.remaining() {
            return Err(format!(
                "{what} is {n} bytes long, past the end of the {}-byte file",
                self.file_len
            ));
        }
        self.string_bytes += n;
        if self.string_bytes > MAX_STRING_BYTES {
            return Err(format!(
                "its metadata strings exceed {MAX_STRING_BYTES} bytes in all (at {what})"
            ));
        }
        Ok(n)
    }

    fn count_values(&mut self, n: u64, key: &str) -> R<()> {
        self.values = self.values.saturating_add(n);
        if self.values > MAX_VALUES {
            return Err(format!(
                "its metadata holds more than {MAX_VALUES} values in all (at `{key}`)"
            ));
        }
        Ok(())
    }

    /// Skips one metadata value of type `ty`, checking every length in it.
    fn value(&mut self, key: &str, ty: u32, depth: usize) -> R<()> {
        self.count_values(1, key)?;
        if let Some(n) = fixed_size(ty) {
            if ty == T_BOOL {
                let [b] = self.bytes::<1>(&format!("metadata `{key}`"))?;
                if b > 1 {
                    return Err(format!("metadata `{key}` is a bool of value {b}"));
                }
                return Ok(());
            }
            return self.skip(n, &format!("metadata `{key}`"));
        }
        match ty {
            T_STRING => {
                let what = format!("metadata `{key}`");
                let n = self.string_len(&what, MAX_STRING_BYTES)?;
                self.skip(n, &what)
            }
            T_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(format!(
                        "metadata `{key}` nests arrays deeper than {MAX_DEPTH} levels"
                    ));
                }
                let elem = self.u32(&format!("the element type of metadata `{key}`"))?;
                let n = self.len(&format!("the length of metadata `{key}`"))?;
                if n > MAX_ARRAY_LEN {
                    return Err(format!(
                        "metadata `{key}` is an array of {n} elements; at most {MAX_ARRAY_LEN} are accepted"
                    ));
                }
                match fixed_size(elem) {
                    Some(size) if elem != T_BOOL => {
                        self.count_values(n, key)?;
                        self.skip(n * size, &format!("metadata `{key}`"))
                    }
                    _ => {
                        if elem != T_BOOL && elem != T_STRING && elem != T_ARRAY {
                            return Err(format!(
                                "metadata `{key}` is an array of unknown type {elem}"
                            ));
                        }
                        // Each element takes at least one byte: the length fits the file.
                        if n > self.remaining() {
                            return Err(format!(
                                "metadata `{key}` declares {n} elements, more than the file's remaining {} bytes",
                                self.remaining()
                            ));
                        }
                        (0..n).try_for_each(|_| self.value(key, elem, depth + 1))
                    }
                }
            }
            other => Err(format!("metadata `{key}` has unknown type {other}")),
        }
    }

    /// `general.alignment`: a 32-bit integer (llama.cpp writes and requires `uint32`) that is a
    /// power of two.
    fn alignment(&mut self, ty: u32) -> R<u64> {
        self.count_values(1, "general.alignment")?;
        let what = "metadata `general.alignment`";
        let v: i64 = match ty {
            T_U8 => self.bytes::<1>(what)?[0].into(),
            T_I8 => i8::from_le_bytes(self.bytes(what)?).into(),
            T_U16 => u16::from_le_bytes(self.bytes(what)?).into(),
            T_I16 => i16::from_le_bytes(self.bytes(what)?).into(),
            T_U32 => self.u32(what)?.into(),
            T_I32 => i32::from_le_bytes(self.bytes(what)?).into(),
            _ => {
                return Err(format!(
                    "{what} has type {ty}; it must be an unsigned 32-bit integer (llama.cpp writes uint32)"
                ))
            }
        };
        match u64::try_from(v) {
            Ok(a) if a.is_power_of_two() => Ok(a),
            _ => Err(format!(
                "{what} is {v}; it must be a power of two (32 unless the file says otherwise)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file::{self, Value};
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};
    use std::io::Cursor;

    /// A small valid GGUF: a few metadata kinds and two tensors.
    fn small() -> Vec<u8> {
        let dev = Device::Cpu;
        let t = |n: usize| {
            QTensor::quantize(
                &Tensor::arange(0f32, n as f32, &dev)
                    .unwrap()
                    .reshape((n / 4, 4))
                    .unwrap(),
                GgmlDType::F32,
            )
            .unwrap()
        };
        let (a, b) = (t(8), t(16));
        let md = [
            ("general.architecture", Value::String("qwen2".into())),
            ("general.alignment", Value::U32(64)),
            (
                "tokenizer.ggml.tokens",
                Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
            ),
            ("x.flag", Value::Bool(true)),
            ("x.n", Value::U64(7)),
        ];
        let md: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (*k, v)).collect();
        let mut out = Cursor::new(Vec::new());
        gguf_file::write(&mut out, &md, &[("a.weight", &a), ("b.weight", &b)]).unwrap();
        out.into_inner()
    }

    /// The byte offset of the value of metadata `key` (after its type).
    fn value_at(bytes: &[u8], key: &str) -> usize {
        let k = key.as_bytes();
        let at = bytes
            .windows(k.len())
            .position(|w| w == k)
            .expect("key in file");
        at + k.len() + 4
    }

    #[test]
    fn a_valid_file_passes_and_agrees_with_candle() {
        let f = small();
        let s = check(Cursor::new(&f)).unwrap();
        let c = gguf_file::Content::read(&mut Cursor::new(&f)).unwrap();
        assert_eq!(s.data_offset, c.tensor_data_offset);
        assert_eq!((s.tensors, s.alignment, s.version), (2, 64, 2));
    }

    #[test]
    fn alignment_zero_and_other_bad_alignments_are_refused() {
        let f = small();
        let at = value_at(&f, "general.alignment");
        for bad in [0u32, 3, 48, u32::MAX] {
            let mut g = f.clone();
            g[at..at + 4].copy_from_slice(&bad.to_le_bytes());
            let e = check(Cursor::new(&g)).unwrap_err();
            assert!(
                e.contains("general.alignment") && e.contains("power of two"),
                "{e}"
            );
        }
        // The type: a u64 alignment, which candle would silently replace by 32.
        let mut g = f.clone();
        g[at - 4..at].copy_from_slice(&T_U64.to_le_bytes());
        let e = check(Cursor::new(&g)).unwrap_err();
        assert!(e.contains("unsigned 32-bit"), "{e}");
    }

    #[test]
    fn huge_counts_and_lengths_are_refused_before_reading() {
        let f = small();
        let mut g = f.clone();
        g[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(check(Cursor::new(&g)).unwrap_err().contains("tensors"));
        let mut g = f.clone();
        g[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(Cursor::new(&g))
            .unwrap_err()
            .contains("metadata entries"));
        // The token array's length.
        let at = value_at(&f, "tokenizer.ggml.tokens") + 4;
        let mut g = f.clone();
        g[at..at + 8].copy_from_slice(&(1u64 << 30).to_le_bytes());
        let e = check(Cursor::new(&g)).unwrap_err();
        assert!(e.contains("tokenizer.ggml.tokens"), "{e}");
        // A tensor dimension: the product overflows, or needs more bytes than the file.
        let name = b"b.weight";
        let at = f.windows(name.len()).rposition(|w| w == name).unwrap() + name.len() + 4;
        for d in [u64::MAX, 1 << 40] {
            let mut g = f.clone();
            g[at..at + 8].copy_from_slice(&d.to_le_bytes());
            let e = check(Cursor::new(&g)).unwrap_err();
            assert!(e.contains("b.weight"), "{e}");
        }
        // Truncated data.
        let e = check(Cursor::new(&f[..f.len() - 1])).unwrap_err();
        assert!(e.contains("beyond the end"), "{e}");
    }

    /// A valid tiny Qwen2 GGUF (hidden 8, one layer, 2/1 heads, an 8-token BPE vocabulary)
    /// that `Policy::load` accepts: the fuzzer's starting point.
    fn tiny_model() -> Vec<u8> {
        let dev = Device::Cpu;
        let mut seed = 0f32;
        let mut t = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            seed += 1.0;
            let v: Vec<f32> = (0..n)
                .map(|i| ((i as f32 + seed) * 0.37).sin() * 0.1)
                .collect();
            QTensor::quantize(&Tensor::from_vec(v, shape, &dev).unwrap(), GgmlDType::F32).unwrap()
        };
        let mut tensors = vec![
            ("token_embd.weight", t(&[8, 8])),
            ("output_norm.weight", t(&[8])),
        ];
        for (name, shape) in [
            ("attn_q.weight", vec![8, 8]),
            ("attn_q.bias", vec![8]),
            ("attn_k.weight", vec![4, 8]),
            ("attn_k.bias", vec![4]),
            ("attn_v.weight", vec![4, 8]),
            ("attn_v.bias", vec![4]),
            ("attn_output.weight", vec![8, 8]),
            ("ffn_gate.weight", vec![16, 8]),
            ("ffn_up.weight", vec![16, 8]),
            ("ffn_down.weight", vec![8, 16]),
            ("attn_norm.weight", vec![8]),
            ("ffn_norm.weight", vec![8]),
        ] {
            tensors.push((
                Box::leak(format!("blk.0.{name}").into_boxed_str()),
                t(&shape),
            ));
        }
        let s = |x: &str| Value::String(x.into());
        let tokens = [
            "<|endoftext|>",
            "a",
            "b",
            "ab",
            "\u{120}",
            "\u{120}a",
            "1",
            "2",
        ];
        let md = vec![
            ("general.architecture", s("qwen2")),
            ("general.alignment", Value::U32(32)),
            ("qwen2.embedding_length", Value::U32(8)),
            ("qwen2.block_count", Value::U32(1)),
            ("qwen2.feed_forward_length", Value::U32(16)),
            ("qwen2.attention.head_count", Value::U32(2)),
            ("qwen2.attention.head_count_kv", Value::U32(1)),
            ("qwen2.context_length", Value::U32(64)),
            ("qwen2.rope.freq_base", Value::F32(10000.0)),
            ("qwen2.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
            ("tokenizer.ggml.model", s("gpt2")),
            ("tokenizer.ggml.pre", s("gpt2")),
            (
                "tokenizer.ggml.tokens",
                Value::Array(tokens.iter().map(|x| s(x)).collect()),
            ),
            (
                "tokenizer.ggml.token_type",
                Value::Array([3, 1, 1, 1, 1, 1, 1, 1].map(Value::I32).to_vec()),
            ),
            (
                "tokenizer.ggml.merges",
                Value::Array(vec![s("a b"), s("\u{120} a")]),
            ),
            ("tokenizer.ggml.eos_token_id", Value::U32(0)),
            ("tokenizer.chat_template", s("{{ messages[0].content }}")),
        ];
        let md: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (*k, v)).collect();
        let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
        let mut out = Cursor::new(Vec::new());
        gguf_file::write(&mut out, &md, &ts).unwrap();
        out.into_inner()
    }

    /// Replaces the file's bytes in place: truncating to zero first makes ext4 flush the
    /// rewrite to disk at close (`auto_da_alloc`), which thousands of mutants cannot afford.
    fn overwrite(path: &std::path::Path, bytes: &[u8]) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
        f.set_len(bytes.len() as u64).unwrap();
    }

    /// Numbers that break careless readers: zero, one, sign bits, sizes past 2^31, 2^32, 2^63.
    const NASTY: [u64; 12] = [
        0,
        1,
        3,
        255,
        1 << 16,
        (1 << 31) + 1,
        1 << 32,
        1 << 40,
        1_000_000_000,
        i64::MAX as u64,
        1 << 63,
        u64::MAX,
    ];

    /// `tiny_model()` mutated `n` times by a seeded generator: flipped bits, nasty numbers
    /// written over lengths, counts, types, dimensions and offsets (anywhere in the header, and
    /// at each metadata value), truncations; each mutant is loaded as a model (header check,
    /// candle's reader, config, tokenizer, tensors) in-process. Returns (loaded, refused).
    fn fuzz(n: usize) -> (usize, usize) {
        use crate::model::{LoadOptions, ModelSource, Policy};
        use rand::{Rng, SeedableRng};
        let base = tiny_model();
        let header_len = check(Cursor::new(&base)).unwrap().data_offset as usize;
        let keys: Vec<usize> = [
            "general.alignment",
            "qwen2.embedding_length",
            "qwen2.block_count",
            "qwen2.feed_forward_length",
            "qwen2.attention.head_count",
            "qwen2.attention.head_count_kv",
            "qwen2.context_length",
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.merges",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.chat_template",
        ]
        .iter()
        .map(|k| value_at(&base, k) - 4)
        .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fuzz.gguf");
        std::fs::write(&path, &base).unwrap();
        let src = ModelSource::Gguf(path.clone());
        Policy::load(&src, &LoadOptions::default()).expect("the unmutated file loads");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(41);
        let (mut loaded, mut refused) = (0, 0);
        for i in 0..n {
            let mut f = base.clone();
            let nasty = NASTY[rng.random_range(0..NASTY.len())];
            match rng.random_range(0..6) {
                0 => {
                    for _ in 0..rng.random_range(1..4) {
                        let at = rng.random_range(0..header_len);
                        f[at] ^= 1 << rng.random_range(0..8);
                    }
                }
                1 => {
                    let at = rng.random_range(0..header_len - 8);
                    f[at..at + 8].copy_from_slice(&nasty.to_le_bytes());
                }
                2 => {
                    let at = rng.random_range(0..header_len - 4);
                    f[at..at + 4].copy_from_slice(&(nasty as u32).to_le_bytes());
                }
                3 => f.truncate(rng.random_range(0..f.len())),
                4 => {
                    // A metadata entry's type (at the key's end) or its value.
                    let at = keys[rng.random_range(0..keys.len())] + rng.random_range(0..2) * 4;
                    let width = [4, 8][rng.random_range(0..2)];
                    f[at..at + width].copy_from_slice(&nasty.to_le_bytes()[..width]);
                }
                _ => {
                    let at = rng.random_range(0..f.len());
                    f[at] = rng.random();
                }
            }
            overwrite(&path, &f);
            let got = std::panic::catch_unwind(|| {
                Policy::load(&src, &LoadOptions::default()).map(|_| ())
            });
            match got {
                Ok(Ok(())) => loaded += 1,
                Ok(Err(e)) => {
                    let mut msg = e.to_string();
                    let mut cause = std::error::Error::source(&e);
                    while let Some(c) = cause {
                        msg = format!("{msg}: {c}");
                        cause = c.source();
                    }
                    assert!(
                        msg.contains("fuzz.gguf"),
                        "mutant {i}: the error does not name the file: {msg}"
                    );
                    refused += 1;
                }
                Err(_) => panic!("mutant {i} panicked (the panic message is above)"),
            }
        }
        (loaded, refused)
    }

    /// The fuzz loop, run by `fuzzed_files_end_in_errors_under_a_memory_limit` in a child
    /// process (an abort there fails that test instead of ending the whole test binary).
    #[test]
    #[ignore = "run in a child process by fuzzed_files_end_in_errors_under_a_memory_limit"]
    fn fuzz_child() {
        if std::env::var_os("COMLRL_GGUF_FUZZ_CHILD").is_none() {
            return;
        }
        let start = std::time::Instant::now();
        let (loaded, refused) = fuzz(5000);
        println!(
            "fuzz: {loaded} loaded, {refused} refused in {:.2} s, peak rss {} MB",
            start.elapsed().as_secs_f64(),
            crate::runtime::peak_rss_bytes().unwrap_or(0) >> 20
        );
        assert!(
            loaded > 200 && refused > 2000,
            "{loaded} loaded, {refused} refused"
        );
    }

    /// Mutated GGUF files load or fail with an error naming the file: never a panic, and never
    /// an allocation sized by a number in the file (the child runs under a 2 GiB address-space
    /// limit, so such an allocation aborts it).
    #[test]
    fn fuzzed_files_end_in_errors_under_a_memory_limit() {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        // The child test's name as the harness lists it (the module path without the crate).
        let child = format!(
            "{}::fuzz_child",
            module_path!().trim_start_matches("comlrl::")
        );
        cmd.args([
            "--exact",
            &child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("COMLRL_GGUF_FUZZ_CHILD", "1")
        .env("RAYON_NUM_THREADS", "1");
        // SAFETY: the closure runs in the forked child before exec and only calls setrlimit,
        // which is async-signal-safe; it touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 2 << 30,
                    rlim_max: 2 << 30,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && stdout.contains("fuzz: "),
            "{}\n{stdout}\n{stderr}",
            out.status
        );
        let line = stdout
            .lines()
            .find(|l| l.contains("fuzz: "))
            .unwrap_or_default();
        eprintln!("{line}");
    }
}
