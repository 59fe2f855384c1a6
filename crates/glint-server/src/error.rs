//! The crate's errors: [`ServerError`] for starting and running the server,
//! [`ApiError`] for one request's failure in OpenAI's shape.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the address or serving failed.
    #[error("{what}: {err}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        err: std::io::Error,
    },
    /// An `--api-key-file` that cannot be read or lists no key.
    #[error("API key file {path}: {reason}")]
    ApiKeyFile {
        /// The file.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// Loading the model or starting the engine failed.
    #[error(transparent)]
    Glint(#[from] glint::Error),
}

/// One request's failure: an HTTP status and OpenAI's error body
/// `{"error": {"code", "message", "type"}}` (plus fields some errors carry,
/// such as the prompt and context sizes).
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// Extra members of the `error` object.
    pub extra: Vec<(&'static str, Value)>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            extra: Vec::new(),
        }
    }

    /// 400: the request is malformed or a field is not usable.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 503: loading, or too many requests waiting.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 500: the engine failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// OpenAI's (and llama-server's) `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
            StatusCode::REQUEST_TIMEOUT => "timeout_error",
            StatusCode::NOT_IMPLEMENTED => "not_supported_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut e = json!({
            "code": self.status.as_u16(),
            "message": self.message,
            "type": self.kind(),
        });
        for (k, v) in &self.extra {
            e[*k] = v.clone();
        }
        json!({ "error": e })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// What the engine refused: the request (400), its queue being full (503),
/// or itself having stopped (500).
impl From<glint::Error> for ApiError {
    fn from(e: glint::Error) -> ApiError {
        match e {
            glint::Error::PromptTooLong { n_prompt, n_ctx } => ApiError {
                status: StatusCode::BAD_REQUEST,
                message: format!(
                    "the request exceeds the available context size: the prompt has \
                     {n_prompt} tokens, the context of a slot {n_ctx}"
                ),
                // llama-server's type for it, which clients test for.
                extra: vec![
                    ("type", json!("exceed_context_size_error")),
                    ("n_prompt_tokens", json!(n_prompt)),
                    ("n_ctx", json!(n_ctx)),
                ],
            },
            glint::Error::Overloaded { .. } => ApiError::unavailable(e.to_string()),
            glint::Error::Stopped => ApiError::internal(e.to_string()),
            e => ApiError::bad_request(e.to_string()),
        }
    }
}
