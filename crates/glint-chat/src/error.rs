//! The one error type of this crate.

/// Everything that can go wrong compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template source is not valid Jinja. Reported by
    /// [`ChatTemplate::new`](crate::ChatTemplate::new), never at render time.
    #[error("chat template does not compile: {message}{}", at_line(*line))]
    Compile {
        /// 1-based line in the template source, when known.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },

    /// The template itself refused the conversation with
    /// `raise_exception(message)`, e.g. roles that do not alternate.
    #[error("chat template refused the conversation: {0}")]
    Template(String),

    /// Rendering failed for another reason: a filter given the wrong type,
    /// a message field the template needs missing, `strftime_now` given a
    /// format it cannot do, the template running out of fuel.
    #[error("chat template failed to render: {message}{}", at_line(*line))]
    Render {
        /// 1-based line in the template source, when known.
        line: Option<usize>,
        /// What went wrong.
        message: String,
    },

    /// The messages or tools could not be turned into template values.
    #[error("cannot pass {what} to the chat template: {message}")]
    Input {
        /// `messages` or `tools`.
        what: &'static str,
        /// Why.
        message: String,
    },
}

fn at_line(line: Option<usize>) -> String {
    match line {
        Some(line) => format!(" (line {line})"),
        None => String::new(),
    }
}

/// This crate's `Result`.
pub type Result<T, E = ChatError> = std::result::Result<T, E>;
