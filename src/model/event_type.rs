//! The type of a watch event, as it appears on the wire.

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// The object appeared (or newly matches the watcher's selection).
    Added,
    /// The object changed and matches before and after.
    Modified,
    /// The object was deleted (or no longer matches); it carries the last matching state.
    Deleted,
    /// A progress marker: every change up to its revision has been delivered.
    Bookmark,
}

impl EventType {
    /// The wire name: `ADDED`, `MODIFIED`, `DELETED` or `BOOKMARK`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
        }
    }
}
