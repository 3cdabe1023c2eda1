/* Workload for C++ name tests: overloads in a namespace, a const method and a
 * plain function, each called a known number of times, then a pause so
 * tracers can read the process's symbols while it lives.
 *
 * Usage: cpp_target    ns::func(int) x3, ns::func(long) x3, ns::Widget::size(int) const x3
 * Workloads write only to stderr: their stdout is shared with the tracer under test.
 */
#include <cstdio>
#include <unistd.h>

namespace ns {
__attribute__((noinline)) int func(int x) { return x + 1; }
__attribute__((noinline)) long func(long x) { return x + 2; }
struct Widget {
	int scale;
	__attribute__((noinline)) int size(int k) const { return k * scale; }
};
} // namespace ns

__attribute__((noinline)) int outer(int n) { return ns::func(n) + 1; }

int main(int argc, char **)
{
	ns::Widget widget{3};
	long sum = 0;
	for (int i = 0; i < 3; i++)
		sum += outer(i + argc) + ns::func(static_cast<long>(i)) + widget.size(i);
	std::fprintf(stderr, "cpp_target done sum=%ld\n", sum);
	usleep(300000);
	return 0;
}
