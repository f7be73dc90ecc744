//! The Python module `rctl._rctl`: [`crate::batch`] for pyarrow.
//!
//! Batches cross through the Arrow C data interface: pyarrow exports a
//! record batch into structs this side allocates (`_export_to_c`), and
//! imports what this side exports (`_import_from_c`); no copy of the
//! columns, and no tie between pyo3's version and arrow's.

use crate::batch::{Decider, Error, Tally};
use arrow_array::ffi::{from_ffi, to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_schema::Schema;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

create_exception!(_rctl, RctlError, PyValueError, "An rctl error.");
create_exception!(
    _rctl,
    ArtifactError,
    RctlError,
    "The artifact cannot be read (another format version, corrupt)."
);
create_exception!(
    _rctl,
    SchemaError,
    RctlError,
    "The table cannot be read as webrequest (a required column missing, a column not text)."
);

fn raise(e: Error) -> PyErr {
    match e {
        Error::Artifact(_) => ArtifactError::new_err(e.to_string()),
        Error::Schema(_) => SchemaError::new_err(e.to_string()),
        _ => RctlError::new_err(e.to_string()),
    }
}

fn arrow(e: arrow_schema::ArrowError) -> PyErr {
    RctlError::new_err(format!("arrow: {e}"))
}

/// A pyarrow `RecordBatch` as a Rust one.
fn batch_from(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    let mut array = FFI_ArrowArray::empty();
    let mut schema = FFI_ArrowSchema::empty();
    obj.call_method1(
        "_export_to_c",
        (
            &mut array as *mut FFI_ArrowArray as usize,
            &mut schema as *mut FFI_ArrowSchema as usize,
        ),
    )?;
    // SAFETY: pyarrow has just filled both structs with a record batch
    // (a struct array) and its schema, as the C data interface defines
    // them; `from_ffi` takes the array's ownership, and the schema is
    // released when it drops.
    let data = unsafe { from_ffi(array, &schema) }.map_err(arrow)?;
    let s = StructArray::from(data);
    Ok(RecordBatch::from(s))
}

/// A pyarrow `Schema` as a Rust one.
fn schema_from(obj: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let mut schema = FFI_ArrowSchema::empty();
    obj.call_method1(
        "_export_to_c",
        (&mut schema as *mut FFI_ArrowSchema as usize,),
    )?;
    Schema::try_from(&schema).map_err(arrow)
}

/// A Rust array as a pyarrow one (`class`: `RecordBatch` or `Array`).
fn export(py: Python<'_>, a: &dyn Array, class: &str) -> PyResult<PyObject> {
    let (mut array, mut schema) = to_ffi(&a.to_data()).map_err(arrow)?;
    let cls = py.import("pyarrow")?.getattr(class)?;
    // pyarrow moves both structs' contents out (marking them released),
    // so dropping them here afterwards frees nothing twice.
    let out = cls.call_method1(
        "_import_from_c",
        (
            &mut array as *mut FFI_ArrowArray as usize,
            &mut schema as *mut FFI_ArrowSchema as usize,
        ),
    )?;
    Ok(out.unbind())
}

fn export_batch(py: Python<'_>, b: RecordBatch) -> PyResult<PyObject> {
    export(py, &StructArray::from(b), "RecordBatch")
}

/// A compiled ruleset (`rctl compile`'s artifact), loaded to decide
/// batches of `webrequest` requests.
#[pyclass(name = "Ruleset", module = "rctl._rctl", unsendable)]
struct PyRuleset {
    inner: Decider,
}

#[pymethods]
impl PyRuleset {
    /// Loads the artifact's bytes for `site` (None: rules naming no site).
    #[new]
    #[pyo3(signature = (artifact, site=None))]
    fn new(artifact: &Bound<'_, PyBytes>, site: Option<String>) -> PyResult<Self> {
        Ok(PyRuleset {
            inner: Decider::load(artifact.as_bytes(), site).map_err(raise)?,
        })
    }

    /// The rules' names, in evaluation order.
    fn rule_names(&self) -> Vec<String> {
        self.inner.rule_names()
    }

    /// The throttle rules on the request path, in evaluation order (indices).
    fn throttles(&self) -> Vec<usize> {
        self.inner.throttles()
    }

    /// The columns of a table of this pyarrow schema to read.
    fn columns(&self, schema: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let s = schema_from(schema)?;
        Ok(self.inner.table(&s).map_err(raise)?.columns)
    }

    /// The fields the ruleset reads that a table of this schema lacks.
    fn missing(&self, schema: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let s = schema_from(schema)?;
        self.inner.missing(&s).map_err(raise)
    }

    /// Decides a record batch (limiters counting across calls).
    fn decide(&mut self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let b = batch_from(batch)?;
        let out = self.inner.decide(&b).map_err(raise)?;
        export_batch(py, out)
    }

    /// One stage of the distributed plan (see the manual).
    fn stage(&mut self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let b = batch_from(batch)?;
        let out = self.inner.stage(&b).map_err(raise)?;
        export_batch(py, out)
    }

    /// Runs throttle rule `rule`'s limiter over the batch's rows, in order.
    fn hit(&mut self, py: Python<'_>, rule: usize, batch: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let b = batch_from(batch)?;
        let out: ArrayRef = self.inner.hit(rule, &b).map_err(raise)?;
        export(py, out.as_ref(), "Array")
    }

    /// A dry-run report to count whole rows into.
    fn tally(&self, name: &str) -> PyResult<PyTally> {
        Ok(PyTally {
            inner: Some(self.inner.tally(name).map_err(raise)?),
        })
    }
}

/// `rctl dry-run`'s report over rows whose throttle outcomes are known.
#[pyclass(name = "Tally", module = "rctl._rctl", unsendable)]
struct PyTally {
    inner: Option<Tally>,
}

#[pymethods]
impl PyTally {
    /// Counts every row of a record batch.
    fn add(&mut self, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = batch_from(batch)?;
        self.inner
            .as_mut()
            .ok_or_else(|| RctlError::new_err("the tally is finished"))?
            .add(&b)
            .map_err(raise)
    }

    /// The report, as `rctl dry-run --format json` writes it (a str).
    fn finish(&mut self) -> PyResult<String> {
        self.inner
            .take()
            .ok_or_else(|| RctlError::new_err("the tally is finished"))?
            .finish()
            .map_err(raise)
    }
}

/// The module.
#[pymodule]
fn _rctl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRuleset>()?;
    m.add_class::<PyTally>()?;
    m.add("RctlError", m.py().get_type::<RctlError>())?;
    m.add("ArtifactError", m.py().get_type::<ArtifactError>())?;
    m.add("SchemaError", m.py().get_type::<SchemaError>())?;
    Ok(())
}
