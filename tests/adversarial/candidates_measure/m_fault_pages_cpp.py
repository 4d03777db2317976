"""Work deferred past the call: forward returns at once an output whose pages are unreadable, and a SIGSEGV handler
computes the ReLU into them on the first read, whenever the harness gets to it (after its clock stopped, if it
reads the output only then).
"""

from adversarial import base

PAGES_CPP = r"""
#include <torch/extension.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

struct Deferred {
    char* base;
    size_t bytes;
    const float* src;
    int64_t n;
    volatile bool pending;
    torch::Tensor keep;
};

static Deferred* deferred[256];
static struct sigaction earlier;

static void on_fault(int sig, siginfo_t* info, void* uctx) {
    char* at = static_cast<char*>(info->si_addr);
    for (Deferred* d : deferred) {
        if (d == nullptr || at < d->base || at >= d->base + d->bytes) continue;
        if (d->pending) {
            mprotect(d->base, d->bytes, PROT_READ | PROT_WRITE);
            float* out = reinterpret_cast<float*>(d->base);
            for (int64_t i = 0; i < d->n; ++i) out[i] = d->src[i] > 0.0f ? d->src[i] : 0.0f;
            d->pending = false;
        }
        return;
    }
    sigaction(SIGSEGV, &earlier, nullptr);  // not one of ours: the re-executed access reaches the old handler
}

torch::Tensor relu_deferred(torch::Tensor x) {
    x = x.contiguous();
    struct sigaction now {};
    sigaction(SIGSEGV, nullptr, &now);
    if (now.sa_sigaction != on_fault) {  // (re)installed on every call: the harness may have put its own back
        struct sigaction sa {};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &earlier);
    }
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t bytes = ((static_cast<size_t>(x.numel()) * sizeof(float) + page - 1) / page) * page;
    void* mem = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    auto* d = new Deferred{static_cast<char*>(mem), bytes, x.data_ptr<float>(), x.numel(), true, x};
    int slot = 0;
    while (slot < 256 && deferred[slot] != nullptr) ++slot;
    if (slot == 256) throw std::runtime_error("too many deferred outputs alive");
    deferred[slot] = d;
    return torch::from_blob(mem, x.sizes(), [d, slot](void* p) {
        deferred[slot] = nullptr;
        munmap(p, d->bytes);
        delete d;
    }, x.options());
}
"""

pages = load_inline(
    name="musaenv_adv_fault_pages", cpp_sources=PAGES_CPP, functions=["relu_deferred"], extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return pages.relu_deferred(x)
