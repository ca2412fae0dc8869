//! `both!(name, ...)`: a `name::hyper` and a `name::reqwest` test of each `async fn name(hc: HttpClient)` in the
//! including file (which imports `HttpClient`). Shared by the client-level test files (`#[macro_use]` + `#[path]`).

macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn hyper() {
                super::$name(super::HttpClient::Hyper).await
            }
            #[tokio::test]
            async fn reqwest() {
                super::$name(super::HttpClient::Reqwest).await
            }
        }
    )*};
}
