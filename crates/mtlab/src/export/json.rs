//! `--json`: the document's data, pretty-printed, one object.

use super::view::Document;
use super::{Exporter, Output};

pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, super::ExportError> {
        let mut text = serde_json::to_string_pretty(&doc.data).map_err(|e| super::ExportError::Encode(e.to_string()))?;
        text.push('\n');
        Ok(vec![Output { file: None, bytes: text.into_bytes() }])
    }
}
