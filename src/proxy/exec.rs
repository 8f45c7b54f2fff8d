//! hyper's executor for a worker: HTTP/2 stream tasks run on the worker's own thread
//! (`spawn_local`), so connection state can be `Rc` and nothing crosses threads.

#[derive(Debug, Clone, Copy, Default)]
pub struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: std::future::Future + 'static,
{
    fn execute(&self, future: F) {
        tokio::task::spawn_local(future);
    }
}
