// SPDX-License-Identifier: Apache-2.0
// fmt's out-of-line functions, compiled into zklock itself so that zklock needs no libfmt.so (Debian
// ships fmt as a shared library only, and that library would bring libstdc++.so back into a zklock
// linked statically against it: see CMakeLists.txt). The templates below are the ones zklock
// uses; a new use of another shows up as an undefined symbol at link time.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template auto dragonbox::to_decimal(float value) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double value) noexcept -> dragonbox::decimal_fp<double>;
template auto thousands_sep_impl(locale_ref locale) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref locale) -> char;
}  // namespace detail
FMT_END_NAMESPACE
