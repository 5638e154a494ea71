//! Files reached through the client instead of the disk: an editor that
//! offers ACP's `fs/read_text_file` and `fs/write_text_file` serves its
//! unsaved buffers and sees every change the agent makes. The `read`,
//! `write` and `edit` tools use it for text when the front-end set one.

use std::path::PathBuf;

use futures_util::future::BoxFuture;

/// What a client offers; each call fails with a message the model sees.
pub trait ClientFiles: Send + Sync {
    /// Whether `read` may go through the client.
    fn can_read(&self) -> bool;
    /// Whether `write` may go through the client.
    fn can_write(&self) -> bool;
    /// The whole text of the file at the absolute `path`.
    fn read(&self, path: PathBuf) -> BoxFuture<'static, Result<String, String>>;
    /// Replaces the file at the absolute `path` with `content`.
    fn write(&self, path: PathBuf, content: String) -> BoxFuture<'static, Result<(), String>>;
}
