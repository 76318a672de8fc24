//! Optional accelerator of the PostgreSQL source: a row of text values to its JSON object.
//!
//! The Python converters (`connectors/postgres/types/`) define every value's JSON form; this
//! module reproduces them byte for byte for the common shapes (text, integers, booleans,
//! Debezium's ISO dates, times and timestamps, decimal strings, flat arrays of the first three)
//! and calls the Python converter for anything
//! else, so its output always equals `orjson.dumps(row_converter(...)(values))`. Whenever it is
//! not sure (an unchanged TOAST value, a binary value, bad UTF-8, a converter that raises), it
//! answers `None` or raises, and the caller takes the pure-Python path, which produces the
//! value or the precise error.
//!
//! A masked column (`cdc/transforms/masks.py`) is written by its mask: `hash` (HMAC-SHA256 in hex),
//! `redact`, `null` and `keep_last` here, without the interpreter; a `plugin` mask is a Python
//! converter like any other.

use std::borrow::Cow;

use hmac::{Hmac, Mac};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use sha2::Sha256;

/// How a column's text becomes JSON: the codes of `TypeKind`
/// (`connectors/postgres/types/kinds.py`), which `connectors/postgres/types/row_encoder.py` passes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text = 0,
    Int = 1,
    Bool = 2,
    Timestamptz = 3,
    IsoTimestamp = 4,
    IsoDate = 5,
    IsoTime = 6,
    Python = 7,
    NumericString = 8,
    TimestamptzP0 = 9,
    TimestamptzP1 = 10,
    TimestamptzP2 = 11,
    TimestamptzP3 = 12,
    TimestamptzP4 = 13,
    TimestamptzP5 = 14,
}

impl Kind {
    fn from_code(code: u8) -> PyResult<Kind> {
        Ok(match code {
            0 => Kind::Text,
            1 => Kind::Int,
            2 => Kind::Bool,
            3 => Kind::Timestamptz,
            4 => Kind::IsoTimestamp,
            5 => Kind::IsoDate,
            6 => Kind::IsoTime,
            7 => Kind::Python,
            8 => Kind::NumericString,
            9 => Kind::TimestamptzP0,
            10 => Kind::TimestamptzP1,
            11 => Kind::TimestamptzP2,
            12 => Kind::TimestamptzP3,
            13 => Kind::TimestamptzP4,
            14 => Kind::TimestamptzP5,
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown column kind {code}"
                )))
            }
        })
    }

    /// The fraction digits of a `timestamptz(p)` kind: `p`, 6 for the type without one.
    fn zoned_width(self) -> Option<usize> {
        match self {
            Kind::Timestamptz => Some(6),
            Kind::TimestamptzP0 => Some(0),
            Kind::TimestamptzP1 => Some(1),
            Kind::TimestamptzP2 => Some(2),
            Kind::TimestamptzP3 => Some(3),
            Kind::TimestamptzP4 => Some(4),
            Kind::TimestamptzP5 => Some(5),
            _ => None,
        }
    }
}

/// A built-in mask (`cdc/transforms/masks.py`): the codes of `MaskKind`
/// (`connectors/postgres/types/kinds.py`), with their parameters.
enum Mask {
    /// HMAC-SHA256 of the text's UTF-8 in lower-case hex; the keyed state, cloned per value.
    Hash(Hmac<Sha256>),
    /// `***`.
    Redact,
    /// Always null.
    Null,
    /// Every character (code point) but the last `n` replaced by `*`.
    KeepLast(usize),
}

/// A column's mask as `connectors/postgres/types/row_encoder.py` plans it: code, `hash`'s key, `keep_last`'s
/// count.
type MaskPlan = (u8, Vec<u8>, usize);

impl Mask {
    fn from_plan((code, key, n): MaskPlan) -> PyResult<Mask> {
        Ok(match code {
            0 => Mask::Hash(
                Hmac::new_from_slice(&key)
                    .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?,
            ),
            1 => Mask::Redact,
            2 => Mask::Null,
            3 => Mask::KeepLast(n),
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown mask kind {code}"
                )))
            }
        })
    }

    /// The masked text of a value's text; `None` for null (`masks.py`'s `Mask.__call__`).
    fn apply<'a>(&self, text: &'a str) -> Option<Cow<'a, str>> {
        match self {
            Mask::Hash(keyed) => {
                let mut mac = keyed.clone();
                mac.update(text.as_bytes());
                Some(Cow::Owned(hex(&mac.finalize().into_bytes())))
            }
            Mask::Redact => Some(Cow::Borrowed("***")),
            Mask::Null => None,
            Mask::KeepLast(n) => Some(keep_last(text, *n)),
        }
    }

    /// Appends the JSON of a value's masked text, as orjson writes it.
    fn write(&self, text: &str, out: &mut Vec<u8>) {
        match self.apply(text) {
            Some(masked) => json_string(&masked, out),
            None => out.extend_from_slice(b"null"),
        }
    }
}

/// `masks.py`'s `keep_last`: `text` with every character but the last `n` replaced by `*`.
fn keep_last(text: &str, n: usize) -> Cow<'_, str> {
    let hidden = text.chars().count().saturating_sub(n);
    if hidden == 0 {
        return Cow::Borrowed(text);
    }
    let kept = text
        .char_indices()
        .nth(hidden)
        .map_or(text.len(), |(i, _)| i);
    let mut masked = "*".repeat(hidden);
    masked.push_str(&text[kept..]);
    Cow::Owned(masked)
}

/// Lower-case hex digits.
const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        text.push(HEX[(b >> 4) as usize] as char);
        text.push(HEX[(b & 0xf) as usize] as char);
    }
    text
}

struct Column {
    /// `"name":`, with a leading comma for every column but the first.
    prefix: Vec<u8>,
    /// `"name"`, for the record key's JSON.
    name_json: Vec<u8>,
    kind: Kind,
    /// The array delimiter when the column is an array of `kind` elements.
    delimiter: Option<u8>,
    /// The Python converter (`str -> value`); `None` for text passed through.
    convert: Option<PyObject>,
    /// A built-in mask, which writes the column instead of its kind.
    mask: Option<Mask>,
}

/// Encodes the rows of one relation (one column layout).
#[pyclass(frozen, module = "connectors.postgres._native")]
struct RowEncoder {
    columns: Vec<Column>,
    key_index: Vec<usize>,
    /// The key columns' names, in key order (the key dict's keys).
    key_names: Vec<Py<PyString>>,
    /// `value -> bytes`: the envelope's JSON encoder, for values a Python converter made.
    dumps: PyObject,
    /// A column only its Python converter writes: `copy_records` then keeps the lock rather
    /// than encode most rows twice.
    python_columns: bool,
}

/// Row JSON, key dict and key JSON: `orjson.dumps(row)`, `{name: value}` of the key columns in
/// key order, and `orjson.dumps(key)`.
type Encoded<'py> = (Bound<'py, PyBytes>, Bound<'py, PyDict>, Bound<'py, PyBytes>);

/// A column as `connectors/postgres/types/row_encoder.py` plans it: name JSON, kind code, array delimiter,
/// converter, built-in mask.
type ColumnPlan = (
    Vec<u8>,
    u8,
    Option<String>,
    Option<PyObject>,
    Option<MaskPlan>,
);

/// A record's key JSON and value (`copy_records`).
type KeyValue<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>);

enum Cell<'a> {
    Null,
    Text(&'a str),
}

#[pymethods]
impl RowEncoder {
    /// `columns`: `(name JSON bytes, kind code, array delimiter or None, converter or None,
    /// mask or None)` per column, a mask being `(mask kind code, key, n)`; `key_index`: the key columns' positions, in key order; `key_names`: their
    /// names; `dumps`: value -> JSON bytes.
    #[new]
    fn new(
        py: Python<'_>,
        columns: Vec<ColumnPlan>,
        key_index: Vec<usize>,
        key_names: Vec<String>,
        dumps: PyObject,
    ) -> PyResult<Self> {
        let mut built = Vec::with_capacity(columns.len());
        for (i, (name_json, code, delimiter, convert, mask)) in columns.into_iter().enumerate() {
            let mut prefix = Vec::with_capacity(name_json.len() + 2);
            if i > 0 {
                prefix.push(b',');
            }
            prefix.extend_from_slice(&name_json);
            prefix.push(b':');
            let kind = Kind::from_code(code)?;
            if kind == Kind::Python && convert.is_none() {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a Python-converted column needs its converter",
                ));
            }
            let delimiter = match delimiter {
                Some(d) if d.len() == 1 => Some(d.as_bytes()[0]),
                Some(_) => {
                    return Err(pyo3::exceptions::PyValueError::new_err(
                        "an array delimiter is one ASCII character",
                    ))
                }
                None => None,
            };
            built.push(Column {
                prefix,
                name_json,
                kind,
                delimiter,
                convert,
                mask: mask.map(Mask::from_plan).transpose()?,
            });
        }
        if key_index.iter().any(|&i| i >= built.len()) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "key index out of range",
            ));
        }
        if key_names.len() != key_index.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "one name per key column",
            ));
        }
        let key_names = key_names
            .iter()
            .map(|n| PyString::intern(py, n).unbind())
            .collect();
        let python_columns = built.iter().any(|column| column.kind == Kind::Python);
        Ok(RowEncoder {
            columns: built,
            key_index,
            key_names,
            dumps,
            python_columns,
        })
    }

    /// Whether a column only its Python converter writes (a plugin mask's, say): `copy_records`
    /// then holds the interpreter lock for the whole piece.
    #[getter]
    fn python_columns(&self) -> bool {
        self.python_columns
    }

    /// The row JSON, key and key JSON of the pgoutput TupleData at `data[pos..]`, or `None` when
    /// the tuple holds something only the Python path handles (unchanged TOAST, binary values,
    /// another column count, bad UTF-8, a truncated message).
    fn encode_tuple<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        pos: usize,
    ) -> PyResult<Option<Encoded<'py>>> {
        let cells = match parse_tuple(data, pos, self.columns.len()) {
            Some(cells) => cells,
            None => return Ok(None),
        };
        self.encode(py, &cells)
    }

    /// The records of lines of `COPY ... TO STDOUT` text (newlines optional), encoded with the
    /// interpreter lock released: per line, `(key JSON, value)`, where the value is `prefix`,
    /// the row's JSON, `middle` and `tail` (the line's sequence, counting up from
    /// `first_sequence`, is its record's position, which the caller keeps beside the value).
    /// `None` for a line the Python path must convert: an escape other than NULL's
    /// `\\N`, another column count, bad UTF-8, or a Python converter that raises (to be
    /// reported).
    ///
    /// Why a batch: a snapshot reader encoding row by row holds the interpreter lock for most
    /// of its time, and the log's writer thread waits for it; here a piece of rows costs the
    /// lock only to make its result objects. A table with a column only Python converts is
    /// encoded with the lock held, as row by row.
    fn copy_records<'py>(
        &self,
        py: Python<'py>,
        lines: Vec<Bound<'py, PyBytes>>,
        prefix: &[u8],
        middle: &[u8],
        tail: &[u8],
        first_sequence: i64,
    ) -> Vec<Option<KeyValue<'py>>> {
        let parts = RecordParts {
            prefix,
            middle,
            tail,
        };
        self.copy_lines(py, &lines, Some(&parts), first_sequence)
    }

    /// `(key JSON, row JSON)` of each line of `COPY ... TO STDOUT` text, as `copy_records`
    /// writes them (lock released, the same lines declined), for rows whose record is
    /// finished later (a watermark window's, once its high watermark's position is known).
    fn copy_rows<'py>(
        &self,
        py: Python<'py>,
        lines: Vec<Bound<'py, PyBytes>>,
    ) -> Vec<Option<KeyValue<'py>>> {
        self.copy_lines(py, &lines, None, 0)
    }

    /// The row JSON, key and key JSON of text values (`None` for NULL), as a COPY row splits into.
    fn encode_values<'py>(
        &self,
        py: Python<'py>,
        values: Vec<Option<Bound<'py, PyString>>>,
    ) -> PyResult<Option<Encoded<'py>>> {
        if values.len() != self.columns.len() {
            return Ok(None);
        }
        let mut cells = Vec::with_capacity(values.len());
        for value in &values {
            cells.push(match value {
                None => Cell::Null,
                Some(text) => Cell::Text(text.to_str()?),
            });
        }
        self.encode(py, &cells)
    }
}

impl RowEncoder {
    fn encode<'py>(&self, py: Python<'py>, cells: &[Cell<'_>]) -> PyResult<Option<Encoded<'py>>> {
        let mut out = Vec::with_capacity(64 + cells.len() * 24);
        let mut key_json = Vec::with_capacity(16 * self.key_index.len() + 2);
        self.write_row(Some(py), cells, &mut out, &mut key_json)?;
        let key = PyDict::new(py);
        for (&i, name) in self.key_index.iter().zip(&self.key_names) {
            key.set_item(name.bind(py), key_value(py, &self.columns[i], &cells[i])?)?;
        }
        Ok(Some((
            PyBytes::new(py, &out),
            key,
            PyBytes::new(py, &key_json),
        )))
    }

    /// Appends the row's JSON to `out` and its key's JSON to `key_json`. Without `py`, a value
    /// that needs a Python converter stops it with `false`, the buffers holding part of a row.
    fn write_row(
        &self,
        py: Option<Python<'_>>,
        cells: &[Cell<'_>],
        out: &mut Vec<u8>,
        key_json: &mut Vec<u8>,
    ) -> PyResult<bool> {
        // Where each column's value JSON lies in `out`: the key JSON reuses the key columns'.
        let mut spans = Vec::with_capacity(cells.len());
        out.push(b'{');
        for (column, cell) in self.columns.iter().zip(cells) {
            out.extend_from_slice(&column.prefix);
            let start = out.len();
            match cell {
                Cell::Null => out.extend_from_slice(b"null"),
                Cell::Text(text) => {
                    if !self.value(py, column, text, out)? {
                        return Ok(false);
                    }
                }
            }
            spans.push((start, out.len()));
        }
        out.push(b'}');
        key_json.push(b'{');
        for (n, &i) in self.key_index.iter().enumerate() {
            if n > 0 {
                key_json.push(b',');
            }
            key_json.extend_from_slice(&self.columns[i].name_json);
            key_json.push(b':');
            let (start, end) = spans[i];
            key_json.extend_from_slice(&out[start..end]);
        }
        key_json.push(b'}');
        Ok(true)
    }

    /// `copy_records` (with `parts`) or `copy_rows` (without: the value is the row's JSON).
    fn copy_lines<'py>(
        &self,
        py: Python<'py>,
        lines: &[Bound<'py, PyBytes>],
        parts: Option<&RecordParts<'_>>,
        first_sequence: i64,
    ) -> Vec<Option<KeyValue<'py>>> {
        // Bytes are immutable, and `lines` holds a reference to each while the slices live.
        let texts: Vec<&[u8]> = lines.iter().map(|line| line.as_bytes()).collect();
        let batch = if self.python_columns {
            self.encode_lines(Some(py), &texts, parts, first_sequence)
        } else {
            py.allow_threads(|| self.encode_lines(None, &texts, parts, first_sequence))
        };
        let mut out = Vec::with_capacity(texts.len());
        for (line, outcome) in texts.iter().zip(&batch.outcomes) {
            out.push(match *outcome {
                Outcome::Done { key, value } => Some((
                    PyBytes::new(py, &batch.keys[key.0..key.1]),
                    PyBytes::new(py, &batch.values[value.0..value.1]),
                )),
                Outcome::Declined => None,
                Outcome::NeedsPython => self.python_record(py, line, parts),
            });
        }
        out
    }

    /// `copy_records`' outcome for every line, and the bytes of those done. Without `py` (the
    /// lock released) a value that needs its Python converter leaves its line to
    /// `python_record`.
    fn encode_lines(
        &self,
        py: Option<Python<'_>>,
        lines: &[&[u8]],
        parts: Option<&RecordParts<'_>>,
        first_sequence: i64,
    ) -> Batch {
        let room = parts.map_or(0, RecordParts::len) + 160;
        let mut batch = Batch {
            values: Vec::with_capacity(lines.len() * room),
            keys: Vec::with_capacity(lines.len() * 16),
            outcomes: Vec::with_capacity(lines.len()),
        };
        for (i, line) in lines.iter().enumerate() {
            // A line past the last sequence has no position: declined, as before.
            let cells = match (
                copy_cells(line, self.columns.len()),
                first_sequence.checked_add(i as i64),
            ) {
                (Some(cells), Some(_)) => cells,
                _ => {
                    batch.outcomes.push(Outcome::Declined);
                    continue;
                }
            };
            let (value_start, key_start) = (batch.values.len(), batch.keys.len());
            if let Some(parts) = parts {
                batch.values.extend_from_slice(parts.prefix);
            }
            let written = self.write_row(py, &cells, &mut batch.values, &mut batch.keys);
            if !matches!(written, Ok(true)) {
                batch.values.truncate(value_start);
                batch.keys.truncate(key_start);
                batch.outcomes.push(match written {
                    Ok(_) => Outcome::NeedsPython,
                    Err(_) => Outcome::Declined, // a converter raised: Python reports it
                });
                continue;
            }
            if let Some(parts) = parts {
                parts.finish(&mut batch.values);
            }
            batch.outcomes.push(Outcome::Done {
                key: (key_start, batch.keys.len()),
                value: (value_start, batch.values.len()),
            });
        }
        batch
    }

    /// `copy_lines`' result for a line that needs a Python converter; `None` if one raises.
    fn python_record<'py>(
        &self,
        py: Python<'py>,
        line: &[u8],
        parts: Option<&RecordParts<'_>>,
    ) -> Option<KeyValue<'py>> {
        let cells = copy_cells(line, self.columns.len())?;
        let mut value = parts.map_or_else(Vec::new, |parts| parts.prefix.to_vec());
        let mut key = Vec::new();
        match self.write_row(Some(py), &cells, &mut value, &mut key) {
            Ok(true) => {}
            _ => return None,
        }
        if let Some(parts) = parts {
            parts.finish(&mut value);
        }
        Some((PyBytes::new(py, &key), PyBytes::new(py, &value)))
    }

    /// Appends a value's JSON; `false` when it needs a Python converter and `py` is `None`.
    fn value(
        &self,
        py: Option<Python<'_>>,
        column: &Column,
        text: &str,
        out: &mut Vec<u8>,
    ) -> PyResult<bool> {
        if let Some(mask) = &column.mask {
            mask.write(text, out);
            return Ok(true);
        }
        let done = match column.delimiter {
            Some(delimiter) => flat_array(column.kind, delimiter, text, out),
            None => scalar(column.kind, text, out),
        };
        if done {
            return Ok(true);
        }
        let py = match py {
            Some(py) => py,
            None => return Ok(false),
        };
        // Not a shape the fast paths know: the Python converter decides (or raises).
        let value = match &column.convert {
            Some(convert) => convert.call1(py, (text,))?,
            None => PyString::new(py, text).into_any().unbind(),
        };
        let encoded = self.dumps.call1(py, (value,))?;
        out.extend_from_slice(encoded.downcast_bound::<PyBytes>(py)?.as_bytes());
        Ok(true)
    }
}

/// The parts of a record value around its row JSON (`copy_records`).
struct RecordParts<'a> {
    prefix: &'a [u8],
    middle: &'a [u8],
    tail: &'a [u8],
}

impl RecordParts<'_> {
    /// The bytes a record adds around its row's JSON.
    fn len(&self) -> usize {
        self.prefix.len() + self.middle.len() + self.tail.len()
    }

    /// After the row's JSON: `middle`, `tail`.
    fn finish(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.middle);
        out.extend_from_slice(self.tail);
    }
}

#[derive(Clone, Copy)]
enum Outcome {
    Done {
        key: (usize, usize),
        value: (usize, usize),
    },
    /// An escape, another column count, bad UTF-8: the Python path converts the line.
    Declined,
    /// A value needs its Python converter: encoded again with the interpreter.
    NeedsPython,
}

struct Batch {
    values: Vec<u8>,
    keys: Vec<u8>,
    outcomes: Vec<Outcome>,
}

/// The fields of a line of COPY text; `None` for an escape other than `\\N`, another column
/// count, or bad UTF-8.
fn copy_cells(line: &[u8], expected: usize) -> Option<Vec<Cell<'_>>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let text = std::str::from_utf8(line).ok()?;
    let mut cells = Vec::with_capacity(expected);
    for field in text.split('\t') {
        if field == "\\N" {
            cells.push(Cell::Null);
        } else if field.contains('\\') {
            return None;
        } else {
            cells.push(Cell::Text(field));
        }
    }
    if cells.len() != expected {
        return None;
    }
    Some(cells)
}

fn key_value(py: Python<'_>, column: &Column, cell: &Cell<'_>) -> PyResult<PyObject> {
    let text = match cell {
        Cell::Null => return Ok(py.None()),
        Cell::Text(text) => *text,
    };
    if let Some(mask) = &column.mask {
        return Ok(match mask.apply(text) {
            Some(masked) => PyString::new(py, &masked).into_any().unbind(),
            None => py.None(),
        });
    }
    if column.delimiter.is_none() {
        if column.kind == Kind::Int && plain_int(text.as_bytes()) {
            if let Ok(number) = text.parse::<i64>() {
                return Ok(number.into_pyobject(py)?.into_any().unbind());
            }
        }
        if column.kind == Kind::Text {
            return Ok(PyString::new(py, text).into_any().unbind());
        }
    }
    match &column.convert {
        Some(convert) => convert.call1(py, (text,)),
        None => Ok(PyString::new(py, text).into_any().unbind()),
    }
}

/// Text values of a TupleData; `None` for anything the fast path leaves to Python.
fn parse_tuple(data: &[u8], mut pos: usize, expected: usize) -> Option<Vec<Cell<'_>>> {
    let count = u16::from_be_bytes(data.get(pos..pos + 2)?.try_into().ok()?) as usize;
    if count != expected {
        return None;
    }
    pos += 2;
    let mut cells = Vec::with_capacity(count);
    for _ in 0..count {
        match *data.get(pos)? {
            b't' => {
                let length = u32::from_be_bytes(data.get(pos + 1..pos + 5)?.try_into().ok()?);
                let start = pos + 5;
                let end = start.checked_add(length as usize)?;
                cells.push(Cell::Text(std::str::from_utf8(data.get(start..end)?).ok()?));
                pos = end;
            }
            b'n' => {
                cells.push(Cell::Null);
                pos += 1;
            }
            _ => return None, // 'u' (unchanged TOAST), 'b' (binary), or malformed
        }
    }
    Some(cells)
}

/// Writes the JSON of a scalar if `text` has the shape the kind's fast path handles.
fn scalar(kind: Kind, text: &str, out: &mut Vec<u8>) -> bool {
    let bytes = text.as_bytes();
    match kind {
        Kind::Text => {
            json_string(text, out);
            true
        }
        Kind::Int => {
            if !plain_int(bytes) {
                return false;
            }
            out.extend_from_slice(bytes);
            true
        }
        Kind::Bool => match bytes {
            b"t" => {
                out.extend_from_slice(b"true");
                true
            }
            b"f" => {
                out.extend_from_slice(b"false");
                true
            }
            _ => false,
        },
        // temporal.py's timestamptz: 'YYYY-MM-DD HH:MM:SS[.f]+00' -> '...THH:MM:SS[.f]Z', the
        // fraction padded to the column's precision (none for timestamptz(0)).
        Kind::Timestamptz
        | Kind::TimestamptzP0
        | Kind::TimestamptzP1
        | Kind::TimestamptzP2
        | Kind::TimestamptzP3
        | Kind::TimestamptzP4
        | Kind::TimestamptzP5 => {
            let width = kind.zoned_width().unwrap_or(6);
            let n = bytes.len();
            if !(n >= 22 && bytes.ends_with(b"+00") && iso_day(bytes) && bytes[10] == b' ') {
                return false;
            }
            let clock = &bytes[11..n - 3];
            if !iso_clock(clock) {
                return false;
            }
            let fraction = if clock.len() > 8 { &clock[9..] } else { b"" };
            if fraction.len() > width {
                return false; // never sent for the column's precision: Python decides
            }
            out.push(b'"');
            out.extend_from_slice(&bytes[..10]);
            out.push(b'T');
            out.extend_from_slice(&clock[..8]);
            if width > 0 {
                out.push(b'.');
                out.extend_from_slice(fraction);
                out.extend(std::iter::repeat_n(b'0', width - fraction.len()));
            }
            out.extend_from_slice(b"Z\"");
            true
        }
        // temporal.py's iso_timestamp: 'YYYY-MM-DD HH:MM:SS[.f]' -> 'YYYY-MM-DDTHH:MM:SS[.f]Z'
        Kind::IsoTimestamp => {
            if !(bytes.len() >= 19
                && iso_day(bytes)
                && bytes[10] == b' '
                && iso_clock(&bytes[11..]))
            {
                return false;
            }
            out.push(b'"');
            out.extend_from_slice(&bytes[..10]);
            out.push(b'T');
            out.extend_from_slice(&bytes[11..]);
            out.extend_from_slice(b"Z\"");
            true
        }
        // temporal.py's iso_date and iso_time: the text with 'Z'.
        Kind::IsoDate => bytes.len() == 10 && iso_day(bytes) && quoted_z(bytes, out),
        Kind::IsoTime => iso_clock(bytes) && quoted_z(bytes, out),
        // decimals.py's numeric_string: the text, Debezium's names for the special values.
        Kind::NumericString => {
            match bytes {
                b"NaN" => out.extend_from_slice(b"\"NAN\""),
                b"Infinity" => out.extend_from_slice(b"\"POSITIVE_INFINITY\""),
                b"-Infinity" => out.extend_from_slice(b"\"NEGATIVE_INFINITY\""),
                _ => json_string(text, out),
            }
            true
        }
        Kind::Python => false,
    }
}

/// 'YYYY-MM-DD' at the start of `bytes`, all digits: a shape temporal.py's `_day` accepts.
fn iso_day(bytes: &[u8]) -> bool {
    bytes.len() >= 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[..10]
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit())
}

/// 'HH:MM:SS[.f{1,6}]', all digits: a shape temporal.py's `_clock_us` accepts.
fn iso_clock(bytes: &[u8]) -> bool {
    let n = bytes.len();
    let shape = n == 8 || (10..=15).contains(&n) && bytes[8] == b'.';
    shape
        && bytes[2] == b':'
        && bytes[5] == b':'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| matches!(i, 2 | 5 | 8) || b.is_ascii_digit())
}

fn quoted_z(bytes: &[u8], out: &mut Vec<u8>) -> bool {
    out.push(b'"');
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"Z\"");
    true
}

/// arrays.py's `_flat`: a one-dimensional array without quoted elements, split on the delimiter.
fn flat_array(kind: Kind, delimiter: u8, text: &str, out: &mut Vec<u8>) -> bool {
    let bytes = text.as_bytes();
    let simple = bytes.len() >= 2
        && bytes[0] == b'{'
        && bytes[bytes.len() - 1] == b'}'
        && !bytes.contains(&b'"')
        && !bytes[1..].contains(&b'{');
    if !simple || !matches!(kind, Kind::Text | Kind::Int | Kind::Bool) {
        return false;
    }
    let mark = out.len();
    out.push(b'[');
    let inner = &text[1..text.len() - 1];
    if !inner.is_empty() {
        for (i, item) in inner.split(delimiter as char).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if item == "NULL" {
                out.extend_from_slice(b"null");
            } else if !scalar(kind, item, out) {
                out.truncate(mark);
                return false;
            }
        }
    }
    out.push(b']');
    true
}

/// `-?[1-9][0-9]{0,17}` or `0`: an integer whose text Python's `int` and orjson leave as is.
fn plain_int(bytes: &[u8]) -> bool {
    let digits = match bytes.first() {
        Some(b'-') => &bytes[1..],
        _ => bytes,
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return false;
    }
    digits == b"0" && bytes.len() == 1 || digits[0] != b'0'
}

/// A JSON string as orjson writes it: short escapes for \b \t \n \f \r, `\u00xx` for other
/// control characters, everything else (including non-ASCII) as UTF-8.
fn json_string(text: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<RowEncoder>()?;
    Ok(())
}
