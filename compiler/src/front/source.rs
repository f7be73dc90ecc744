//! Source files, spans and line/column lookup.

use std::path::{Path, PathBuf};

/// Index of a file in a [`SourceMap`].
pub type FileId = u32;

/// A region of one source file. Every AST node carries one.
///
/// `start` and `end` are byte offsets; `line` and `col` (1-based, columns
/// counted in characters) locate `start` for humans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    /// The file this span is in.
    pub file: FileId,
    /// Byte offset of the first byte.
    pub start: u32,
    /// Byte offset one past the last byte.
    pub end: u32,
    /// 1-based line of `start`.
    pub line: u32,
    /// 1-based column (in characters) of `start`.
    pub col: u32,
}

/// One loaded source: a `.rctl` file or an ipblock list file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The path as given by the user (or resolved from an include).
    pub path: PathBuf,
    /// The text. Non-UTF-8 input never gets here; it is a diagnostic.
    pub text: String,
    line_starts: Vec<u32>,
    /// `None` when the text is ASCII (a column is then a byte distance);
    /// else the number of characters before each [`BLOCK`]-byte block.
    chars_before_block: Option<Vec<u32>>,
}

/// Bytes per entry of the character index of a non-ASCII text.
const BLOCK: usize = 256;

/// Characters that start in `b` (its bytes that are not UTF-8
/// continuation bytes).
fn char_starts(b: &[u8]) -> usize {
    b.iter().filter(|&&x| x & 0xc0 != 0x80).count()
}

impl SourceFile {
    /// Wraps a text and indexes its line starts (and, if it is not ASCII,
    /// its characters), so that every span's column is found in constant
    /// time however long its line.
    pub fn new(path: PathBuf, text: String) -> Self {
        let mut line_starts = vec![0u32];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                line_starts.push(i as u32 + 1);
            }
        }
        let chars_before_block = (!text.is_ascii()).then(|| {
            let mut n = 0u32;
            let mut marks = vec![0u32];
            for block in text.as_bytes().chunks(BLOCK) {
                n += char_starts(block) as u32;
                marks.push(n);
            }
            marks
        });
        SourceFile {
            path,
            text,
            line_starts,
            chars_before_block,
        }
    }

    /// Characters before byte offset `at` (clamped to the text).
    fn chars_before(&self, at: usize) -> usize {
        let at = at.min(self.text.len());
        match &self.chars_before_block {
            None => at,
            Some(marks) => {
                let block = at / BLOCK;
                marks[block] as usize + char_starts(&self.text.as_bytes()[block * BLOCK..at])
            }
        }
    }

    /// 1-based line and character column of a byte offset.
    pub fn line_col(&self, offset: u32) -> (u32, u32) {
        let line_idx = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line_idx] as usize;
        let col = self.chars_before(offset as usize) - self.chars_before(start);
        (line_idx as u32 + 1, col as u32 + 1)
    }

    /// Byte offset of a 1-based line and 1-based column (in characters):
    /// the inverse of [`SourceFile::line_col`], in constant time however
    /// long the line (for parsers that report positions as line and
    /// column). A line past the last is the end of the text; a column past
    /// its line's end counts on into the following lines, and past the
    /// text's end is its end. The offset is always on a character boundary.
    pub fn offset_of(&self, line: u32, col: u32) -> usize {
        let len = self.text.len();
        let Some(&start) = self.line_starts.get((line as usize).saturating_sub(1)) else {
            return len;
        };
        let start = start as usize;
        let col = (col as usize).saturating_sub(1);
        let Some(marks) = &self.chars_before_block else {
            return start.saturating_add(col).min(len);
        };
        // The character wanted, counted from the start of the text; then
        // the last block that starts at or before it, and a walk in it.
        let want = self.chars_before(start).saturating_add(col);
        // (Every block holds a character's start, so the counts increase;
        // the first is 0, so there is always such a block.)
        let block = match marks.binary_search(&(want.min(u32::MAX as usize) as u32)) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        let from = (block * BLOCK).min(len);
        let mut n = marks[block] as usize;
        for (i, b) in self.text.as_bytes()[from..].iter().enumerate() {
            if b & 0xc0 != 0x80 {
                if n == want {
                    return from + i;
                }
                n += 1;
            }
        }
        len
    }

    /// [`SourceFile::offset_of`] with the line and column of the offset
    /// found: those given when the column is on its line (no search), else
    /// what [`SourceFile::line_col`] says. For building a [`Span`] from a
    /// parser's line and column.
    pub fn locate(&self, line: u32, col: u32) -> (usize, u32, u32) {
        let off = self.offset_of(line, col);
        let idx = (line as usize).wrapping_sub(1);
        let on_line = match (self.line_starts.get(idx), self.line_starts.get(idx + 1)) {
            (Some(&start), Some(&next)) => off >= start as usize && off < next as usize,
            (Some(&start), None) => off >= start as usize,
            _ => false,
        };
        if on_line && col >= 1 {
            (off, line, col)
        } else {
            let (l, c) = self.line_col(off as u32);
            (off, l, c)
        }
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: u32) -> &str {
        let idx = (line as usize).saturating_sub(1);
        let Some(&start) = self.line_starts.get(idx) else {
            return "";
        };
        let end = self
            .line_starts
            .get(idx + 1)
            .map_or(self.text.len(), |&e| e as usize);
        self.text[start as usize..end].trim_end_matches(['\n', '\r'])
    }

    /// Builds a span for a byte range of this file.
    pub fn span(&self, file: FileId, start: usize, end: usize) -> Span {
        let (line, col) = self.line_col(start as u32);
        Span {
            file,
            start: start as u32,
            end: end as u32,
            line,
            col,
        }
    }
}

/// All sources of one compilation, addressed by [`FileId`].
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file and returns its id.
    pub fn add(&mut self, path: PathBuf, text: String) -> FileId {
        self.files.push(SourceFile::new(path, text));
        (self.files.len() - 1) as FileId
    }

    /// The file with this id.
    pub fn get(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id as usize)
    }

    /// All files, in load order.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// Finds an already loaded file by path.
    pub fn find(&self, path: &Path) -> Option<FileId> {
        self.files
            .iter()
            .position(|f| f.path == path)
            .map(|i| i as FileId)
    }

    /// The text a span covers, or "" for a span outside its file.
    pub fn snippet(&self, span: Span) -> &str {
        self.get(span.file)
            .and_then(|f| f.text.get(span.start as usize..span.end as usize))
            .unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters_not_bytes() {
        let f = SourceFile::new("x".into(), "ab\n\u{e9}\u{e9}x\n".into());
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(3), (2, 1));
        // "éé" is 4 bytes; 'x' is the third character of line 2.
        assert_eq!(f.line_col(7), (2, 3));
        assert_eq!(f.line_text(2), "\u{e9}\u{e9}x");
        assert_eq!(f.line_text(9), "");
    }

    #[test]
    fn offset_of_inverts_line_col() {
        let mut text = String::new();
        for i in 0..3_000 {
            text.push(['a', '\u{e9}', '\u{20ac}', '\u{1f600}'][i % 4]);
            if i % 997 == 0 {
                text.push('\n');
            }
        }
        for t in [text.clone(), "ab\ncd\n".repeat(300)] {
            let f = SourceFile::new("x".into(), t.clone());
            for (off, _) in t.char_indices().chain([(t.len(), ' ')]) {
                let (line, col) = f.line_col(off as u32);
                assert_eq!(f.offset_of(line, col), off, "at {off}");
            }
            assert_eq!(f.offset_of(1_000_000, 1), t.len());
            for (off, _) in t.char_indices().step_by(7) {
                let (line, col) = f.line_col(off as u32);
                assert_eq!(f.locate(line, col), (off, line, col));
            }
            let end = f.line_col(t.len() as u32);
            assert_eq!(f.locate(1_000_000, 1), (t.len(), end.0, end.1));
            assert_eq!(f.offset_of(1, u32::MAX), t.len());
        }
        // A column past the end of its line counts on into the next.
        let f = SourceFile::new("x".into(), "\u{e9}\nb\n".into());
        assert_eq!(f.offset_of(1, 3), 3);
        assert_eq!(f.offset_of(1, 4), 4);
        assert_eq!(f.locate(1, 3), (3, 2, 1));
        assert_eq!(f.locate(1, 4), (4, 2, 2));
    }

    #[test]
    fn columns_on_long_lines_match_counting_characters() {
        // Across the index's block boundaries, with characters of 1 to 4
        // bytes, some of them straddling a boundary.
        let mut text = String::new();
        for i in 0..3_000 {
            text.push(['a', '\u{e9}', '\u{20ac}', '\u{1f600}'][i % 4]);
            if i % 997 == 0 {
                text.push('\n');
            }
        }
        let f = SourceFile::new("x".into(), text.clone());
        for (off, _) in text.char_indices().chain([(text.len(), ' ')]) {
            let line_start = text[..off].rfind('\n').map_or(0, |n| n + 1);
            let want = text[line_start..off].chars().count() as u32 + 1;
            assert_eq!(f.line_col(off as u32).1, want, "at {off}");
        }
    }
}
