//! One configuration problem: what loading reports, all at once.

use std::fmt;

/// One configuration problem. Messages name settings and explain; they never
/// contain a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The setting concerned.
    pub setting: String,
    /// Stable code: `missing_required`, `weak_secret`, `key_malformed`,
    /// `key_wrong_type`, `invalid_value`, `insecure_combination`,
    /// `forbidden_for_role`, `ambiguous_source`, `unreadable_file`,
    /// `invalid_file`, `unknown_setting`.
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(setting: &str, code: &'static str, message: String) -> Self {
        Self { setting: setting.to_owned(), code, message }
    }
    pub(crate) fn new_dynamic(setting: String, code: &'static str, message: String) -> Self {
        Self { setting, code, message }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.setting, self.message, self.code)
    }
}
