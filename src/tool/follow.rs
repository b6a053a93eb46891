//! A segment followed by its name, for the readers that run on (`top`, `log --follow`,
//! `metrics --listen`): a deploy removes the segment (`shmtool clean NAME`) and the new
//! master creates another under the same name; a reader that kept the mapping it opened
//! would show the old, unlinked segment for ever.

use crate::error::Result;
use crate::table::Table;

/// Segment `name`, opened as an observer, reopened whenever the name stops naming the
/// file mapped.
pub struct Followed {
    name: String,
    open: Option<Table>,
}

/// What [`Followed::current`] found.
pub enum Now<'a> {
    /// The segment read before (or the first one).
    Same(&'a Table),
    /// Another segment has the name since the last read: its first read.
    Anew(&'a Table),
}

impl Now<'_> {
    pub fn table(&self) -> &Table {
        match self {
            Now::Same(t) | Now::Anew(t) => t,
        }
    }
}

impl Followed {
    /// Opens segment `name`, which must exist now.
    pub fn open(name: &str) -> Result<Followed> {
        Ok(Followed {
            name: name.to_owned(),
            open: Some(Table::open_observer(name)?),
        })
    }

    /// The segment that has the name now: the one mapped if the name still names its
    /// file (`(dev, ino)`: an `fstat` of the mapping's file against an `lstat` of the
    /// name), else the one that has it now, opened anew. An error, and nothing kept, when
    /// the name names no readable segment (none, or one still being created); the next
    /// call looks again.
    pub fn current(&mut self) -> Result<Now<'_>> {
        let now = crate::segment::named_file_id(&self.name).ok();
        let same = match (self.open.as_ref(), now) {
            (Some(t), Some(id)) => t.engine().seg().file_id().is_ok_and(|mine| mine == id),
            _ => false,
        };
        if same {
            return Ok(Now::Same(
                self.open
                    .as_ref()
                    .expect("`same` holds only for an open table"),
            ));
        }
        // Dropped first: a name that names nothing now is not read from the old file.
        self.open = None;
        Ok(Now::Anew(
            self.open.insert(Table::open_observer(&self.name)?),
        ))
    }
}
