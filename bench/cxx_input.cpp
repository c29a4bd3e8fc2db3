// A C++ input for `mtlab report` speed (docs/benchmarks.md): little code, the
// standard library's headers (6.7 M events of cc1plus at -O2).
#include <bits/stdc++.h>
#include <regex>
#include <filesystem>
#include <ranges>
template <int N> struct F { static constexpr long v = F<N-1>::v + F<N-2>::v; std::vector<std::map<int, std::string>> x; };
template <> struct F<1> { static constexpr long v = 1; };
template <> struct F<0> { static constexpr long v = 0; };
int main() { std::regex r("a+b*"); std::map<std::string, std::vector<std::set<int>>> m; auto x = F<60>::v; std::cout << x << std::regex_match("aab", r) << m.size(); std::unordered_map<long, std::deque<std::string>> u; for (auto [k, v] : u) std::cout << k << v.size(); }
