//! Plain text tables for the terminal, aligned by comfy-table whatever the
//! width of a cell: no borders, two spaces between columns, no trailing
//! blanks, never wrapped (a pipe gets the same lines as a terminal).

use comfy_table::{presets, CellAlignment, ContentArrangement, Table};

/// A table with `header`; the columns whose index is in `right` are
/// right-aligned (numbers), the others left-aligned.
pub fn new(header: &[&str], right: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    let last = header.len().saturating_sub(1);
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, if i == last { 0 } else { 2 }));
        if right.contains(&i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// The table's lines, each ending in `\n`, without trailing blanks.
pub fn render(t: &Table) -> String {
    t.lines().map(|l| l.trim_end().to_string() + "\n").collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_stay_aligned_past_any_width() {
        let mut t = new(&["ID", "LABEL", "NAME"], &[0]);
        t.add_row(["1", "a", "short"]);
        t.add_row(["12345", "a_label_much_longer_than_twenty_characters", "x"]);
        let text = render(&t);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let col = |l: &str, w: &str| l.find(w).unwrap();
        assert_eq!(col(lines[0], "NAME"), col(lines[1], "short"), "{text}");
        assert_eq!(col(lines[0], "NAME"), col(lines[2], "x"), "{text}");
        assert_eq!(col(lines[0], "LABEL"), col(lines[2], "a_label"), "{text}");
        assert!(
            lines[1].starts_with("    1  "),
            "numbers right-aligned: {text}"
        );
        assert!(text.lines().all(|l| !l.ends_with(' ')), "{text:?}");
    }
}
