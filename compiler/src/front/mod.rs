//! The front end: source text to the spanned AST. Where a ruleset may
//! read ([`files`]), how its files and includes are loaded ([`load`],
//! [`lists`] for ipblock list files), the grammar's parse ([`parse`]) into
//! the [`ast`] with its syntax errors explained (`syntax`), and the
//! canonical printer ([`fmt`]).

pub mod ast;
pub mod files;
pub mod fmt;
pub(crate) mod lists;
pub mod load;
pub mod parse;
pub mod source;
mod syntax;
